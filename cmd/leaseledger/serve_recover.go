package main

import (
	"strconv"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/projector/live"
)

// recoveryText is serve's line for what live.Recover recorded at start:
// what a previous serve, killed or crashed, left open.
func recoveryText(r live.RecoveryReport) string {
	return strconv.Itoa(r.Sessions) + " MCP session(s) and " + strconv.Itoa(r.Leases) + " lease(s) a previous serve left open recorded as ended (" +
		string(events.TerminatedHostLost) + "; " + strconv.Itoa(r.Lost) + " guardian(s) " + string(events.LostHelper) + ", unconfirmed)"
}
