package gatewaybench

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger/ledgerbench"
)

// fsyncBlock is the size of one fsync floor write.
const fsyncBlock = 4096

// fsyncFloor appends n blocks of fsyncBlock bytes to a new file at path,
// each followed by datasync (fdatasync on Linux), and returns each write's
// and sync's time: what one durable commit costs on this disk, with
// nothing of Pebble.
// The file grows, as a write-ahead log written as it goes does; it is
// removed.
func fsyncFloor(path string, n int) ([]time.Duration, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer os.Remove(path)
	return timeSyncs(f, n, func(_ int, buf []byte) error {
		_, err := f.Write(buf)
		return err
	})
}

// writtenFsyncFloor is fsyncFloor over blocks written before: a new file
// at path is written with n blocks of fsyncBlock bytes and synced, then each
// block is written again in order, each write followed by datasync, and
// each write's and sync's time is returned. The file's size and blocks do
// not change, so a sync flushes only data: what a commit costs on a
// recycled or written-ahead write-ahead log (ledger/walfill.go). The file
// is removed.
func writtenFsyncFloor(path string, n int) ([]time.Duration, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	defer os.Remove(path)
	if _, err := f.Write(make([]byte, n*fsyncBlock)); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	if err := f.Sync(); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	return timeSyncs(f, n, func(i int, buf []byte) error {
		_, err := f.WriteAt(buf, int64(i)*fsyncBlock)
		return err
	})
}

// timeSyncs makes n durable writes of one fsyncBlock to f, each write(i,
// block) followed by datasync, and returns each one's time; it closes f.
func timeSyncs(f *os.File, n int, write func(i int, block []byte) error) ([]time.Duration, error) {
	buf := make([]byte, fsyncBlock)
	for i := range buf {
		buf[i] = byte(i)
	}
	out := make([]time.Duration, 0, n)
	for i := range n {
		t := time.Now()
		if err := write(i, buf); err != nil {
			return nil, errors.Join(err, f.Close())
		}
		if err := datasync(f); err != nil {
			return nil, errors.Join(err, f.Close())
		}
		out = append(out, time.Since(t))
	}
	return out, f.Close()
}

// pebbleCommitEvents is the number of events in one commit of the Pebble
// floor: a sequential HTTP gateway call's six (its admission and
// registration, and the previous call's settle facts and completion that
// ride them).
const pebbleCommitEvents = 6

// pebbleFloor makes n raw Pebble Sync commits, one after the other, each
// of pebbleCommitEvents events (ledgerbench.SampleDraft, a call.finished)
// whose keys and values are exactly those the ledger writes for them
// (ledgerbench.RunRaw: a fresh Pebble at dir with the ledger's options), and returns each commit's time: what one durable
// commit of a call's events costs through Pebble, with nothing of the
// ledger's own pipeline. dir is removed.
func pebbleFloor(ctx context.Context, dir string, n int) ([]time.Duration, error) {
	drafts := make([]events.Draft, n*pebbleCommitEvents)
	for i := range drafts {
		drafts[i] = ledgerbench.SampleDraft(i)
	}
	sealed, err := ledgerbench.Seal(drafts)
	if err != nil {
		return nil, err
	}
	_, lat, err := ledgerbench.RunRaw(ctx, dir, ledgerbench.Config{Concurrency: 1, Batch: pebbleCommitEvents}, sealed, nil)
	return lat, err
}
