package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/leaseledger/leaseledger/events"
)

func itoa(n int) string { return strconv.Itoa(n) }

func sha256hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func allActions() []events.AccessAction { return events.AccessActions() }
