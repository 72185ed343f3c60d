package redis

import "context"

// Credentials gives the user name and password that a new connection
// authenticates with (AUTH or HELLO), asked for each connection as it is
// opened, so that a password that changes reaches every connection opened
// after the change without a restart.
//
// Credentials runs on the path of a request that waits for the
// connection: it must be safe for concurrent use and quick, returning
// what it holds rather than fetching it. An error fails that connection,
// and the requests waiting for it, with the error.
type Credentials interface {
	Credentials(ctx context.Context) (username, password string, err error)
}
