package bounds

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"
)

const rlsMethod = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// BenchmarkTap measures what the stream bound adds to a unary call as it
// opens, against making the transport's context alone: only a check for
// Envoy's calls, which carry a 20 ms grpc-timeout, and a timer for calls
// without a deadline.
func BenchmarkTap(b *testing.B) {
	sb := &Streams{Timeout: 2 * time.Second, Stopping: context.Background(), Streaming: map[string]bool{watchMethod: true}}
	info := &tap.Info{FullMethodName: rlsMethod}
	for _, bb := range []struct {
		name     string
		deadline time.Duration
	}{{"envoy_20ms", 20 * time.Millisecond}, {"no_deadline", 0}} {
		for _, tapped := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/tap=%v", bb.name, tapped), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					// The transport's own context for the stream.
					ctx, cancel := context.WithCancel(context.Background())
					if bb.deadline > 0 {
						ctx, cancel = context.WithTimeout(context.Background(), bb.deadline)
					}
					if tapped {
						sb.Tap(ctx, info) //nolint:errcheck // never fails
					}
					cancel()
				}
			})
		}
	}
}

// TestHandlersDone: Done is closed at once with no handler running, and
// otherwise once the last running handler returns.
func TestHandlersDone(t *testing.T) {
	var h Handlers
	select {
	case <-h.Done():
	default:
		t.Fatal("Done with no handler running is not closed")
	}
	release, entered := make(chan struct{}), make(chan struct{})
	ended := make(chan error)
	go func() {
		ended <- h.Stream(nil, nil, nil, func(any, grpc.ServerStream) error {
			close(entered)
			<-release
			return nil
		})
	}()
	<-entered
	done := h.Done()
	select {
	case <-done:
		t.Fatal("Done closed while a handler runs")
	default:
	}
	close(release)
	if err := <-ended; err != nil {
		t.Fatal(err)
	}
	<-done // closed by the handler's end; the test times out otherwise
}

// TestFirstMessageTime: a streaming call that sends no message is
// cancelled after Timeout, or after its method's own FirstMessage time,
// and not once its first message has arrived.
func TestFirstMessageTime(t *testing.T) {
	const report = "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas"
	synctest.Test(t, func(t *testing.T) {
		sb := &Streams{Timeout: 2 * time.Second, Stopping: context.Background(),
			Streaming:    map[string]bool{watchMethod: true, report: true},
			FirstMessage: map[string]time.Duration{report: 10 * time.Second}}
		watch, _ := sb.Tap(context.Background(), &tap.Info{FullMethodName: watchMethod})
		rep, _ := sb.Tap(context.Background(), &tap.Info{FullMethodName: report})
		start := time.Now()
		<-watch.Done()
		if d := time.Since(start); d != 2*time.Second {
			t.Errorf("a Watch without a message cancelled after %v, want 2s", d)
		}
		if rep.Err() != nil {
			t.Fatalf("a report stream cancelled after %v, before its 10s", time.Since(start))
		}
		<-rep.Done()
		if d := time.Since(start); d != 10*time.Second {
			t.Errorf("a report stream without a message cancelled after %v, want 10s", d)
		}
	})
}
