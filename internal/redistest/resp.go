package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// do sends one command to addr on a new connection and returns the reply:
// a string for simple and bulk strings, an int64, a []any, nil for a null
// reply, or an error for an error reply or a connection problem. It keeps
// readiness checks free of client library state and goroutines.
func do(addr string, timeout time.Duration, args ...string) (any, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return nil, err
	}
	return readReply(bufio.NewReader(conn))
}

// doString is do for commands that reply with a string.
func doString(addr string, timeout time.Duration, args ...string) (string, error) {
	reply, err := do(addr, timeout, args...)
	if err != nil {
		return "", err
	}
	s, ok := reply.(string)
	if !ok {
		return "", fmt.Errorf("%s: reply %v is not a string", args[0], reply)
	}
	return s, nil
}

// readReply reads one RESP2 reply.
func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty reply line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, fmt.Errorf("redis error: %s", line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		items := make([]any, n)
		for i := range items {
			if items[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return items, nil
	default:
		return nil, fmt.Errorf("unexpected reply line %q", line)
	}
}

// infoField returns the value of field in an INFO or CLUSTER INFO reply.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// pairs turns a flat [k1 v1 k2 v2 ...] reply into a map.
func pairs(reply any) map[string]string {
	items, _ := reply.([]any)
	m := make(map[string]string, len(items)/2)
	for i := 0; i+1 < len(items); i += 2 {
		k, _ := items[i].(string)
		v, _ := items[i+1].(string)
		m[k] = v
	}
	return m
}
