package refbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
)

// What a process and Redis have spent: CPU from /proc, and Redis's own
// accounts (INFO cpu and commandstats).

// ProcessCPU returns the user plus system CPU time process pid has used, all
// its threads included, from /proc/<pid>/stat. Its resolution is 10 ms.
func ProcessCPU(pid int) (time.Duration, error) {
	if pid <= 0 {
		return 0, fmt.Errorf("no process (pid %d)", pid)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces
	// and parentheses itself; the fields after the last ')' start with
	// field 3, so utime (field 14) and stime (15) are the 12th and 13th.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')' in %q", pid, stat)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name, want at least 13", pid, len(f))
	}
	var ticks uint64
	for _, field := range f[11:13] {
		v, err := strconv.ParseUint(field, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// userHZ is the unit of utime and stime in /proc/<pid>/stat: USER_HZ,
// 100 on Linux whatever the kernel's HZ.
const userHZ = 100

// RedisCPU returns the CPU time Redis has used, user and system, from
// INFO cpu (in µs).
func RedisCPU(ctx context.Context, rdb goredis.UniversalClient) (time.Duration, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for line := range strings.SplitSeq(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO cpu %q: %w", line, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// ThreadRunTimes returns the time each thread of process pid has run on
// a CPU, by thread id, from /proc/<pid>/task/<tid>/schedstat
// (nanoseconds).
func ThreadRunTimes(pid int) (map[string]time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	times := make(map[string]time.Duration, len(tasks))
	for _, t := range tasks {
		data, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread ended meanwhile
		}
		if err != nil {
			return nil, err
		}
		f := strings.Fields(string(data))
		if len(f) == 0 {
			return nil, fmt.Errorf("%s/%s/schedstat: empty", dir, t.Name())
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s/%s/schedstat: %w", dir, t.Name(), err)
		}
		times[t.Name()] = time.Duration(ns)
	}
	return times, nil
}

// ScriptStats returns how many EVAL and EVALSHA calls (plain and _RO)
// Redis has run and the µs it spent in them, from INFO commandstats.
func ScriptStats(ctx context.Context, rdb goredis.UniversalClient) (calls, usec int64, err error) {
	stats, err := redistest.CommandStats(ctx, rdb)
	if err != nil {
		return 0, 0, err
	}
	for _, name := range []string{"eval", "evalsha", "eval_ro", "evalsha_ro"} {
		calls += stats[name].Calls
		usec += stats[name].Usec
	}
	return calls, usec, nil
}

// ScriptCommands returns the commands, in lower case, that the Lua
// scripts in dir run (redis.call or redis.pcall of a literal name).
func ScriptCommands(dir string) (map[string]bool, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.lua"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no *.lua in %s", dir)
	}
	call := regexp.MustCompile(`redis\.p?call\('([A-Za-z]+)'`)
	cmds := map[string]bool{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, m := range call.FindAllSubmatch(src, -1) {
			cmds[strings.ToLower(string(m[1]))] = true
		}
	}
	return cmds, nil
}
