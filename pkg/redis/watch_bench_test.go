package redis

import (
	"context"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// BenchmarkWatchHook measures what the watch's hook adds to a call that
// succeeds while no refusal lasts, the hot path: a call of next alone,
// and through the hook, for one command and for a pipeline of eight.
func BenchmarkWatchHook(b *testing.B) {
	h := newWatch(nil).hook(RoleServer, "127.0.0.1:6379", false)
	ctx := context.Background()
	cmd := goredis.NewIntSliceCmd(ctx, "evalsha", "0123", 1, "k")
	cmds := []goredis.Cmder{cmd, cmd, cmd, cmd, cmd, cmd, cmd, cmd}
	process := func(context.Context, goredis.Cmder) error { return nil }
	pipeline := func(context.Context, []goredis.Cmder) error { return nil }
	hooked, hookedPipeline := h.ProcessHook(process), h.ProcessPipelineHook(pipeline)
	b.Run("process/bare", func(b *testing.B) {
		for b.Loop() {
			_ = process(ctx, cmd)
		}
	})
	b.Run("process/hooked", func(b *testing.B) {
		for b.Loop() {
			_ = hooked(ctx, cmd)
		}
	})
	b.Run("pipeline8/bare", func(b *testing.B) {
		for b.Loop() {
			_ = pipeline(ctx, cmds)
		}
	})
	b.Run("pipeline8/hooked", func(b *testing.B) {
		for b.Loop() {
			_ = hookedPipeline(ctx, cmds)
		}
	})
}
