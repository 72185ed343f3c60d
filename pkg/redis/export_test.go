package redis

// Slot returns the hash slot of key, for tests.
func Slot(key string) uint16 { return slot("", key) }

// SlotWithPrefix returns the hash slot of prefix+key, for tests.
func SlotWithPrefix(prefix, key string) uint16 { return slot(prefix, key) }
