//go:build linux

package helper

import (
	"testing"

	"github.com/leaseledger/leaseledger/internal/testproc"
)

// Binaries the tests build once (testproc.Main): the real helper, as the
// idle benchmark runs it, and the test target whose "orphan" mode leaves
// real orphans behind.
var (
	helperBin = &testproc.Binary{Out: "leaseledger-guardian", Pkg: "github.com/leaseledger/leaseledger/cmd/leaseledger-guardian"}
	targetBin = &testproc.Binary{Out: "testtarget", Pkg: "github.com/leaseledger/leaseledger/guardian/internal/testtarget"}
)

func TestMain(m *testing.M) { testproc.Main(m, helperBin, targetBin) }
