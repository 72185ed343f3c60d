package rejectlog

// NotLogged returns how many rejections l left out since its last line.
func NotLogged(l *Log) uint64 { return l.notLogged.Load() }
