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
	l, err := ledger.Open(ledger.Options{Dir: a.dataDir, Logger: a.logger, ReadOnly: true})
	if err != nil {
		return nil, err
	}
	noteReadOnly(a, l.LockNote())
	return l, nil
}

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
