package main

import (
	"fmt"

	"github.com/leaseledger/leaseledger/ledger"
)

// openReadOnly opens the data directory for a read command (head, export,
// audit, leases, checkpoint): read-only, so that nothing in the directory is
// created or changed (it works on a read-only mount, and on a full disk it
// writes nothing), and says on stderr how the directory is held.
func openReadOnly(a *app) (*ledger.Ledger, error) {
	po := ledger.DefaultPebbleOptions()
	po.MaxOpenFiles = readOnlyMaxOpenTables
	l, err := ledger.Open(ledger.Options{Dir: a.dataDir, Logger: a.logger, ReadOnly: true, PebbleOptions: po})
	if err != nil {
		return nil, err
	}
	noteReadOnly(a, l.LockNote())
	return l, nil
}

// readOnlyMaxOpenTables bounds the table readers a read command keeps open
// (Pebble's file cache; each reader holds its table's footer, properties and
// block handles, tens of KiB). Pebble's default keeps up to a thousand, so a
// full scan's memory grew with the number of tables, that is with history
// (leases on a 10^7-event ledger of 279 tables: about 50 MiB more than on a
// 10^5-event one). A scan in seq order reads one table per level at a time,
// so a smaller cache costs only the reopening of a table a later lookup
// needs again.
const readOnlyMaxOpenTables = 64

// noteReadOnly tells the user that the data directory was opened read-only
// and whether writers are kept out meanwhile; unlocked is why no lock could
// be taken (empty: a shared lock is held).
func noteReadOnly(a *app, unlocked string) {
	if unlocked == "" {
		fmt.Fprintf(a.stderr, "leaseledger: %s opened read-only (nothing is written to it; shared lock: writers are refused while this runs)\n", a.dataDir)
		return
	}
	fmt.Fprintf(a.stderr, "leaseledger: %s opened read-only and NOT locked against writers (%s): a process writing to it meanwhile may change what is read\n", a.dataDir, unlocked)
}
