package redis

import (
	"context"
	"errors"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// TestSentinelSwitchErrors: the refusals of a failover the store follows
// say so (limits.ErrStoreSwitching, which a circuit breaker does not
// count) as well as that the store is unavailable; a node that is not a
// master, which may last, says only the latter.
func TestSentinelSwitchErrors(t *testing.T) {
	tests := []struct {
		give          error
		wantSwitching bool
	}{
		{errFailingOver, true},
		{errMasterChanged, true},
		{errNotMaster, false},
	}
	for _, tt := range tests {
		err := wrap(context.Background(), "apply", tt.give)
		if !errors.Is(err, limits.ErrStoreUnavailable) || errors.Is(err, limits.ErrStoreSwitching) != tt.wantSwitching {
			t.Errorf("%v: unavailable %v, switching %v; want unavailable, switching %v", err,
				errors.Is(err, limits.ErrStoreUnavailable), errors.Is(err, limits.ErrStoreSwitching), tt.wantSwitching)
		}
	}
}
