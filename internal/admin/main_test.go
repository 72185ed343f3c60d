package admin_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: Health.Run,
// the gRPC health servers and Watch streams must all end with their
// tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
