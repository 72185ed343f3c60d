package redislog_test

import (
	"context"
	"fmt"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redislog"
)

// TestOncePerOutage: each kind of message is logged once until
// Recovered, then once again; every one is counted, and Recovered says
// how many were not logged.
func TestOncePerOutage(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	l := redislog.New(zap.New(core))
	ctx := context.Background()
	dial := "redis: connection pool: failed to dial after %d attempts: %v"
	for range 10 {
		l.Printf(ctx, dial, 1, "connection refused")
	}
	l.Printf(ctx, "sentinel: GetMasterAddrByName master=%q failed: %s", "mymaster", "i/o timeout")
	if got := logs.FilterMessage("go-redis").Len(); got != 2 {
		t.Errorf("%d go-redis lines for 10 dial failures and one sentinel failure, want 2", got)
	}
	l.Recovered()
	if got := logs.FilterMessage("go-redis messages not logged during the outage").All(); len(got) != 1 || got[0].ContextMap()["messages"] != uint64(9) {
		t.Errorf("Recovered logged %v, want one line of 9 messages", got)
	}
	l.Printf(ctx, dial, 1, "connection refused")
	if got := logs.FilterMessage("go-redis").Len(); got != 3 {
		t.Errorf("%d go-redis lines after a second outage began, want 3", got)
	}
	if l.Messages() != 12 {
		t.Errorf("Messages() = %d, want 12", l.Messages())
	}
}

// TestKindsBounded: an outage of ever new kinds of message logs a
// bounded number of them.
func TestKindsBounded(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	l := redislog.New(zap.New(core))
	for i := range 1000 {
		l.Printf(context.Background(), fmt.Sprintf("message %d: %%v", i), "x")
	}
	if got := logs.Len(); got > 64 {
		t.Errorf("%d lines for 1000 kinds of message, want at most 64", got)
	}
}
