package config

// SetReadFile makes r read each rule file with readFile instead of
// os.ReadFile. Call it before r's first Reload or Watch.
func SetReadFile(r *Reloader, readFile func(string) ([]byte, error)) { r.readFile = readFile }

// CheckSize exposes checkSize to the tests.
var CheckSize = checkSize
