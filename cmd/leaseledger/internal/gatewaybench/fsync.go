package gatewaybench

import (
	"errors"
	"os"
	"time"
)

// fsyncBlock is the size of one fsync floor write.
const fsyncBlock = 4096

// fsyncFloor appends n blocks of fsyncBlock bytes to a new file at path,
// each followed by datasync (fdatasync on Linux), and returns each write's
// and sync's time: what one durable commit costs on this disk, with
// nothing of Pebble.
// The file grows, as the ledger's write-ahead log does; it is removed.
func fsyncFloor(path string, n int) ([]time.Duration, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer os.Remove(path)
	buf := make([]byte, fsyncBlock)
	for i := range buf {
		buf[i] = byte(i)
	}
	out := make([]time.Duration, 0, n)
	for range n {
		t := time.Now()
		if _, err := f.Write(buf); err != nil {
			return nil, errors.Join(err, f.Close())
		}
		if err := datasync(f); err != nil {
			return nil, errors.Join(err, f.Close())
		}
		out = append(out, time.Since(t))
	}
	return out, f.Close()
}
