// Package store is the private door from the packages under ledger/ (verify)
// to a ledger's Pebble database, so that the database never appears in
// package ledger's public API.
//
// The door is a pair of hooks that package ledger installs in its init:
// this package cannot import ledger (ledger imports it to install them), and
// verify imports ledger anyway, so by the time verify runs the hooks are set.
// The ledger is passed as an opaque value and checked by ledger's hook; a
// value that is not an open *ledger.Ledger is refused with an error.
package store

import (
	"errors"

	"github.com/cockroachdb/pebble/v2"
)

// Access is read access to a ledger's database. Release it when done; until
// then the ledger cannot finish closing.
type Access struct {
	// DB is the database. Readers must treat it as read-only: writing to it
	// bypasses the chain.
	DB *pebble.DB
	// Release ends the access.
	Release func() error
	// ReadErr wraps an error met reading seqs first..last (last 0: just
	// first): storage corruption becomes a *ledger.Error wrapping
	// ledger.ErrCorrupt, narrowed to the damaged file's range when known;
	// other errors come back wrapped in a *ledger.Error too.
	ReadErr func(op string, first, last uint64, err error) error
	// Unlocked, for a directory opened read-only without a lock, says why
	// it could not be locked; empty when it is held with a shared lock (or
	// the access is to an open ledger).
	Unlocked string
}

var (
	ofLedger func(l any) (Access, error)
	ofDir    func(dir string, po *pebble.Options) (Access, error)
)

// Install sets the hooks; package ledger calls it once, from its init.
func Install(ledgerHook func(l any) (Access, error), dirHook func(dir string, po *pebble.Options) (Access, error)) {
	ofLedger, ofDir = ledgerHook, dirHook
}

var errNotInstalled = errors.New("ledger/internal/store: package ledger is not linked")

// OfLedger gives read access to the database of an open *ledger.Ledger.
func OfLedger(l any) (Access, error) {
	if ofLedger == nil {
		return Access{}, errNotInstalled
	}
	return ofLedger(l)
}

// OfDir opens the database of the ledger in dir read-only, writing
// nothing to the directory, under a shared lock when one can be had (see
// Access.Unlocked), without the checks ledger.Open makes on the head (a
// verifier must be able to open a damaged log to name the damage).
//
// po, when not nil, is the base Pebble configuration (as
// ledger.Options.PebbleOptions): a reader bounds Pebble's memory with it
// (block cache, open tables, the memtables the write-ahead log is
// replayed into). The ledger still sets what read-only opening needs.
func OfDir(dir string, po *pebble.Options) (Access, error) {
	if ofDir == nil {
		return Access{}, errNotInstalled
	}
	return ofDir(dir, po)
}
