// Package bounds holds every bound on what a client can make the sidecar
// hold, and the server settings that apply them (Server, GRPC): the
// connections a listener holds open (Listener, which closes the quietest
// connection not working to make room), the TLS handshakes that compute
// at once (HandshakeGate), the time a gRPC call has to send its request
// and the streaming calls shutdown waits for (Streams, Handlers), the
// size of each method's messages (Codec), what an RLQS report's bucket
// ids may decode to, and the bytes of messages still on their way
// (Messages, which ends a stream that stops mid-message).
//
// The sidecar's Unix socket is opened here too (ListenUnix), beside the
// listeners it caps. docs/bounds.md explains each bound.
package bounds
