//go:build linux

package runtime_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/runtime"
)

// A manager memoises one fingerprint per config name, up to a bound; each
// time more names than the bound empty the memo it is counted, so an
// operator can see a config source with more names than the memo holds.
func ExampleManager_FingerprintMemoResets() {
	helper, _ := runtime.BuiltBinaries()
	dir, err := os.MkdirTemp("", "runtime-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	l, err := ledger.Open(ledger.Options{Dir: filepath.Join(dir, "ledger")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	m, err := runtime.NewManager(runtime.Options{Config: &runtime.MapConfigSource{}, Ledger: l, HelperPath: helper})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close(context.Background())
	fmt.Println("memo resets:", m.FingerprintMemoResets())
	// Output: memo resets: 0
}
