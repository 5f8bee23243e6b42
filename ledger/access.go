package ledger

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	"github.com/leaseledger/leaseledger/ledger/internal/store"
)

// init installs the read access that ledger/verify uses (through
// ledger/internal/store, which nothing outside ledger/ can import), so that
// the Pebble database stays out of this package's public API.
func init() { store.Install(accessLedger, accessDir) }

// accessLedger registers a read on an open ledger (Close waits for it) and
// hands out its database.
func accessLedger(x any) (store.Access, error) {
	l, ok := x.(*Ledger)
	if !ok || l == nil {
		return store.Access{}, &Error{Op: "read", Err: errors.New("store access: not a *ledger.Ledger")}
	}
	end, err := l.beginRead("read")
	if err != nil {
		return store.Access{}, err
	}
	return store.Access{DB: l.db, Release: func() error { end(); return nil },
		ReadErr: func(op string, first, last uint64, err error) error {
			return l.readErr(op, Seq(first), Seq(last), err)
		}}, nil
}

// accessDir opens dir's database the way a read-only Open does (ErrNoLedger,
// ErrLocked while a writer holds it, a shared lock or none, nothing written
// to the directory), with none of Open's checks of the head: a damaged log
// must open so that its damage can be named. po, when set, is the base
// Pebble configuration, as Options.PebbleOptions.
func accessDir(dir string, po *pebble.Options) (store.Access, error) {
	if err := requireLedger(dir); err != nil {
		return store.Access{}, err
	}
	lock, _, note, err := lockShared(dir)
	if err != nil {
		return store.Access{}, err
	}
	unlock := func() {
		if lock != nil {
			lock.Close()
		}
	}
	f := newFaults(slog.Default())
	db, err := pebble.Open(dir, pebbleOptions(Options{Dir: dir, ReadOnly: true, PebbleOptions: po}, f))
	if err != nil {
		unlock()
		if pebble.IsCorruptionError(err) {
			err = fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return store.Access{}, &Error{Op: "open", Err: fmt.Errorf("%s read-only: %w", dir, err)}
	}
	// A standalone ledger value carries the faults and counters for
	// readErr; it has no committer and is never returned.
	l := &Ledger{db: db, logger: slog.Default(), faults: f}
	return store.Access{DB: db, Unlocked: note,
		ReadErr: func(op string, first, last uint64, err error) error {
			return l.readErr(op, Seq(first), Seq(last), err)
		},
		Release: func() error {
			err := db.Close()
			unlock()
			if err != nil {
				return &Error{Op: "close", Err: err}
			}
			return nil
		}}, nil
}
