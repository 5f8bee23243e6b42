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
	return store.Access{DB: l.db, Release: func() error { end(); return nil }}, nil
}

// accessDir locks dir like Open does (ErrNoLedger, ErrLocked) and opens its
// database read-only, with none of Open's checks of the head: a damaged log
// must open so that its damage can be named.
func accessDir(dir string) (store.Access, error) {
	if err := requireLedger(dir); err != nil {
		return store.Access{}, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return store.Access{}, err
	}
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, Logger: quietLogger{slog.Default()}})
	if err != nil {
		lock.Close()
		return store.Access{}, &Error{Op: "open", Err: fmt.Errorf("%s read-only: %w", dir, err)}
	}
	return store.Access{DB: db, Release: func() error {
		err := db.Close()
		lock.Close()
		if err != nil {
			return &Error{Op: "close", Err: err}
		}
		return nil
	}}, nil
}
