package main

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// strictTar reads a tar archive as the strictest readers do (GNU tar,
// Python's tarfile), not as Go's archive/tar, which accepts an archive
// that stops after a file's last byte: every header's checksum and magic,
// every file's bytes and the padding to its 512-byte block, and two zero
// blocks at the end, in a stream whose size is a multiple of 512. It
// returns the regular files by name (PAX and GNU long names applied).
func strictTar(b []byte) (map[string][]byte, error) {
	const block = 512
	if len(b)%block != 0 {
		return nil, fmt.Errorf("%d bytes, not a multiple of %d", len(b), block)
	}
	files := map[string][]byte{}
	var longName string
	var pax map[string]string
	for off := 0; ; {
		if off+block > len(b) {
			return nil, fmt.Errorf("ends at byte %d without the two zero blocks that end an archive", off)
		}
		h := b[off : off+block]
		if isZero(h) {
			if off+2*block > len(b) || !isZero(b[off+block:off+2*block]) {
				return nil, fmt.Errorf("one zero block at byte %d, want two to end the archive", off)
			}
			if !isZero(b[off:]) {
				return nil, fmt.Errorf("data after the end-of-archive blocks at byte %d", off)
			}
			return files, nil
		}
		if err := checkHeader(h); err != nil {
			return nil, fmt.Errorf("header at byte %d: %w", off, err)
		}
		name := cString(h[0:100])
		if prefix := cString(h[345:500]); prefix != "" {
			name = prefix + "/" + name
		}
		size, err := tarNumber(h[124:136])
		if err != nil {
			return nil, fmt.Errorf("header of %q: size: %w", name, err)
		}
		if v, ok := pax["size"]; ok {
			if size, err = strconv.ParseInt(v, 10, 64); err != nil {
				return nil, fmt.Errorf("PAX size of %q: %w", name, err)
			}
		}
		if v, ok := pax["path"]; ok {
			name = v
		}
		if longName != "" {
			name = longName
		}
		off += block
		padded := (size + block - 1) / block * block
		if int64(off)+padded > int64(len(b)) {
			return nil, fmt.Errorf("%q: %d bytes and padding to %d, but the archive ends %d bytes after its header",
				name, size, padded, len(b)-off)
		}
		data := b[off : int64(off)+size]
		typ := h[156]
		if typ != 'x' && typ != 'L' {
			longName, pax = "", nil
		}
		switch typ {
		case 'x':
			if pax, err = paxRecords(data); err != nil {
				return nil, fmt.Errorf("PAX header before byte %d: %w", off, err)
			}
		case 'L':
			longName = strings.TrimRight(string(data), "\x00")
		case '0', 0:
			files[name] = bytes.Clone(data)
		}
		off += int(padded)
	}
}

// checkHeader checks a header block's checksum and its ustar magic.
func checkHeader(h []byte) error {
	want, err := tarNumber(h[148:156])
	if err != nil {
		return fmt.Errorf("checksum field: %w", err)
	}
	var sum int64
	for i, c := range h {
		if i >= 148 && i < 156 {
			c = ' '
		}
		sum += int64(c)
	}
	if sum != want {
		return fmt.Errorf("checksum %d, header sums to %d", want, sum)
	}
	if magic := string(h[257:265]); magic != "ustar\x0000" && magic != "ustar  \x00" {
		return fmt.Errorf("magic %q is neither POSIX ustar nor GNU", magic)
	}
	return nil
}

// tarNumber reads a numeric header field: octal, NUL- or space-ended, or
// base-256 when its first byte has the high bit set.
func tarNumber(f []byte) (int64, error) {
	if f[0]&0x80 != 0 {
		var n int64
		for i, c := range f {
			if i == 0 {
				c &= 0x7f
			}
			n = n<<8 | int64(c)
		}
		return n, nil
	}
	s := strings.Trim(string(f), " \x00")
	if s == "" {
		return 0, nil
	}
	return strconv.ParseInt(s, 8, 64)
}

// paxRecords parses "<length> <key>=<value>\n" records.
func paxRecords(b []byte) (map[string]string, error) {
	out := map[string]string{}
	for len(b) > 0 {
		sp := bytes.IndexByte(b, ' ')
		if sp < 0 {
			return nil, fmt.Errorf("record without a length: %q", b)
		}
		n, err := strconv.Atoi(string(b[:sp]))
		if err != nil || n <= sp || n > len(b) || b[n-1] != '\n' {
			return nil, fmt.Errorf("bad record length in %q", b)
		}
		k, v, ok := strings.Cut(string(b[sp+1:n-1]), "=")
		if !ok {
			return nil, fmt.Errorf("record without '=': %q", b[:n])
		}
		out[k] = v
		b = b[n:]
	}
	return out, nil
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
