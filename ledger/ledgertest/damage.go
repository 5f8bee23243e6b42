// Package ledgertest builds real damaged ledgers for tests: a data directory
// whose events are flushed into a Pebble sstable, in which the data block
// holding a chosen event is then overwritten, so that reading it fails
// Pebble's block checksum exactly as a bad disk or a careless hand would.
// It is used by the tests of ledger, ledger/verify, bus and the CLI;
// nothing else links it.
package ledgertest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
)

// Draft is the i-th event (seq i in a ledger written by WriteFlushed): a
// call.finished whose call id carries Marker(i), found again in the
// sstable by DamageEvent.
func Draft(i int) events.Draft {
	return events.Draft{Activation: fmt.Sprintf("a%d", i%3), Session: fmt.Sprintf("s%d", i%2),
		Payload: &events.CallFinished{CallID: Marker(i), Tool: "echo", Outcome: "ok", DurationNS: int64(i),
			ArgsSHA256: strings.Repeat("ef", 32)}}
}

// Marker is the text unique to event i.
func Marker(i int) string { return fmt.Sprintf("dmg-%06d", i) }

// WriteFlushed writes n events (seqs 1..n, see Draft) to a new ledger in dir,
// closes it and flushes everything into an uncompressed sstable, so that
// the events are read from that file (not the write-ahead log) afterwards.
func WriteFlushed(t testing.TB, dir string, n int) {
	t.Helper()
	WriteFlushedWith(t, dir, func(l *ledger.Ledger) {
		for i := 1; i <= n; i++ {
			if _, err := l.Append(context.Background(), Draft(i)); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// WriteFlushedWith is WriteFlushed with the appends made by write.
func WriteFlushedWith(t testing.TB, dir string, write func(l *ledger.Ledger)) {
	t.Helper()
	l, err := ledger.Open(ledger.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	write(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	po := &pebble.Options{FormatMajorVersion: pebble.FormatNewest, Logger: quiet{}}
	po.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionNone })
	db, err := pebble.Open(dir, po)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// DamageEvent overwrites 8 bytes of the data block that holds event seq in dir's
// sstables (written by WriteFlushed) and returns the file it damaged.
func DamageEvent(t testing.TB, dir string, seq int) string {
	t.Helper()
	ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	for _, path := range ssts {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		at := bytes.Index(b, []byte(Marker(seq)))
		if at < 0 {
			continue
		}
		for i := at; i < at+8; i++ {
			b[i] ^= 0xff
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	t.Fatalf("ledgertest: event %d is in no sstable of %s (%d files)", seq, dir, len(ssts))
	return ""
}

type quiet struct{}

func (quiet) Infof(string, ...any)           {}
func (quiet) Errorf(string, ...any)          {}
func (quiet) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
