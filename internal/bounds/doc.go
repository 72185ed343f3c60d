// Package bounds holds the bounds on what a gRPC client can make the
// sidecar hold: the size of each method's messages (Codec), what an RLQS
// report's bucket ids may decode to, and the bytes of messages still on
// their way (Messages, which ends a stream that stops mid-message).
//
// The connection caps and the TLS handshake gate are in internal/listen,
// and the time to send a request in internal/grpcbound; issue 40 moves
// them here.
package bounds
