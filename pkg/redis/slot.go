package redis

// slotCount is the number of Redis Cluster hash slots.
const slotCount = 16384

// crcTable is the CRC16-CCITT (XMODEM) table that Redis Cluster hashes
// keys with: polynomial 0x1021, initial value 0.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

// slot returns the Redis Cluster hash slot of the key prefix+key, which
// prefix must not contain '{' for: the CRC16 of the key's hash tag (the
// bytes between its first '{' and the next '}', if any), else of the
// whole key, modulo 16384.
func slot(prefix, key string) uint16 {
	if tag, ok := hashTag(key); ok {
		return crc16(0, tag) % slotCount
	}
	return crc16(crc16(0, prefix), key) % slotCount
}

// hashTag returns the hash tag of key, if it has a non-empty one.
func hashTag(key string) (string, bool) {
	for i := 0; i < len(key); i++ {
		if key[i] != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				return key[i+1 : j], j > i+1
			}
		}
		return "", false
	}
	return "", false
}

// crc16 continues the CRC16 crc over s.
func crc16(crc uint16, s string) uint16 {
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^s[i]]
	}
	return crc
}
