package redislog

import (
	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// ConfigError logs a refusal of the sidecar by Redis for its
// configuration as it starts or changes, at Error, with Redis's own
// message, and as it ends, at Info: once each, however many calls meet
// it (redis.LazyOptions.OnConfigError).
func ConfigError(log *zap.Logger, e *redis.ConfigError, cleared bool) {
	fields := []zap.Field{zap.String("kind", e.Kind), zap.String("redis_role", e.Role), zap.String("redis_addr", e.Addr)}
	if cleared {
		log.Info(configErrorEnded[e.Kind], fields...)
		return
	}
	log.Error(configErrorStarted[e.Kind], append(fields, zap.String("redis_message", e.Msg))...)
}

var (
	configErrorStarted = map[string]string{
		redis.KindAuth: "redis authentication failed; not ready until it is fixed, retrying meanwhile",
		redis.KindACL:  "redis ACL refuses a command the sidecar needs; not ready until it is fixed, retrying meanwhile",
		redis.KindTLS:  "redis TLS handshake failed; not ready until it is fixed, retrying meanwhile",
	}
	configErrorEnded = map[string]string{
		redis.KindAuth: "redis authentication ok",
		redis.KindACL:  "redis ACL allows the sidecar's commands",
		redis.KindTLS:  "redis TLS handshake ok",
	}
)
