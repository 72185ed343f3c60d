package main

import (
	"context"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// What gRPC health reports: NOT_SERVING while the rules source waits for
// its first rules (xDS without --force-start-without-rules), while no rule
// is loaded with --health-requires-rules, and while Redis refuses the
// sidecar's configuration with --health-requires-redis-config (on by
// default run as ratelimit); SERVING otherwise, until shutdown, after which
// health.Server keeps every name NOT_SERVING. /healthcheck follows the
// same conditions (internal/admin).

// notServing returns why the sidecar is not serving, "" if it is.
func (s *servers) notServing() string {
	ready, waiting := pending(s.rules)
	select {
	case <-ready:
	default:
		return waiting()
	}
	if !servingRules(s.c, s.engine.Rules()) {
		return "no rules loaded"
	}
	if s.c.ref.healthRequiresRedisConfig {
		if err := s.st.refused(); err != nil {
			return err.Error()
		}
	}
	return ""
}

// refreshHealth sets every health name of s to what notServing says now.
// It is called whenever one of its conditions may have changed: after
// each reload or push, once the first rules arrive, and as Redis starts
// or stops refusing the configuration.
func (s *servers) refreshHealth() {
	// Held from reading the conditions to setting the status, so that a
	// status read before a change is never set after it.
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	st := healthpb.HealthCheckResponse_SERVING
	if s.notServing() != "" {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	for _, name := range s.healthNames {
		s.health.SetServingStatus(name, st)
	}
}

// followHealth refreshes health whenever Redis starts or stops refusing
// the configuration, until ctx ends.
func (s *servers) followHealth(ctx context.Context) {
	if s.st.refusalChanged == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.st.refusalChanged:
			s.refreshHealth()
		}
	}
}
