// Package testproc owns what tests that start real processes share: building
// the binaries they run (the guardian helper, test targets, test servers)
// with the go tool, and proving after the suite that no goroutine and no
// child process of the test binary is left behind.
package testproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"go.uber.org/goleak"
)

// Binary names one package to build and where to put it.
type Binary struct {
	Out string // output path
	Pkg string // import path
}

// Build builds each binary with CGO_ENABLED=0 (the guardian ships static),
// stopping at the first failure, whose error carries the go tool's output.
func Build(bins ...Binary) error {
	for _, b := range bins {
		cmd := exec.Command(GoTool(), "build", "-o", b.Out, b.Pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %w\n%s", b.Pkg, err, out)
		}
	}
	return nil
}

// GoTool is the go command: from PATH, else from the running toolchain.
func GoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// ChildrenOf lists the processes whose parent is pid.
func ChildrenOf(pid int) []int {
	var kids []int
	names, _ := filepath.Glob("/proc/[0-9]*")
	for _, n := range names {
		p, err := strconv.Atoi(filepath.Base(n))
		if err != nil {
			continue
		}
		if ppid, _, ok := Stat(p); ok && ppid == pid {
			kids = append(kids, p)
		}
	}
	return kids
}

// Stat reads the parent pid and state letter of pid from /proc/<pid>/stat.
func Stat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces and parentheses
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0][0], err == nil
}

// Running reports whether pid exists and is neither a zombie nor dead.
func Running(pid int) bool {
	_, state, ok := Stat(pid)
	return ok && state != 'Z' && state != 'X'
}

// Leftovers reports what a test binary left behind after its tests: leaked
// goroutines (goleak) and child processes still present in /proc. It
// returns nil when there is nothing; TestMain fails the run otherwise.
func Leftovers() error {
	var problems []string
	if err := goleak.Find(); err != nil {
		problems = append(problems, "goroutine leak: "+err.Error())
	}
	if kids := ChildrenOf(os.Getpid()); len(kids) > 0 {
		problems = append(problems, fmt.Sprintf("child processes left behind: %v", kids))
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(problems, "\n"))
}
