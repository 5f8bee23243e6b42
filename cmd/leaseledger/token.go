package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/gateway"
)

func init() { extraCommands = append(extraCommands, newTokenCmd) }

// tokenFileMode is the mode of a token file token add creates: it holds
// only hashes, but who may add a line decides who may connect.
const tokenFileMode = 0o600

func newTokenCmd(a *app) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Manage the bearer tokens of serve's MCP endpoint (serve --tokens FILE)",
		Long: `token edits the token file serve's MCP endpoint reads (--tokens FILE): one
line "<name> <hash>" per token, hash = sha256:<hex> of the token. The name is
the principal recorded for every session the token opens. Only hashes are
stored: 'token add' prints the token once and never again.

serve reads the file again on SIGHUP: a removed token is refused (401) from
then on and the sessions it opened are ended.`,
	}
	cmd.PersistentFlags().StringVar(&file, "file", "", "the token file (required)")
	_ = cmd.MarkPersistentFlagRequired("file")

	add := &cobra.Command{
		Use:   "add NAME",
		Short: "Add a token named NAME, print it once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if !gateway.ValidTokenName(name) {
				return errors.New("token name: want " + events.IDRule)
			}
			lines, mode, err := readTokenLines(file)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			for _, l := range lines {
				if tokenLineName(l) == name {
					return fmt.Errorf("a token named %s is already in %s (remove it first)", name, file)
				}
			}
			plain, err := gateway.NewToken()
			if err != nil {
				return err
			}
			lines = append(lines, gateway.TokenLine(name, gateway.HashToken(plain)))
			if err := writeTokenLines(file, lines, mode); err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, plain)
			fmt.Fprintf(a.stderr, "leaseledger: token %s added to %s; it is shown only now (send SIGHUP to a running serve to load it)\n", name, file)
			return nil
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "Print the name of every token in the file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lines, _, err := readTokenLines(file)
			if err != nil {
				return err
			}
			for _, l := range lines {
				if n := tokenLineName(l); n != "" {
					fmt.Fprintln(a.stdout, n)
				}
			}
			return nil
		},
	}
	remove := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove the token named NAME",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			lines, mode, err := readTokenLines(file)
			if err != nil {
				return err
			}
			kept := lines[:0:0]
			for _, l := range lines {
				if tokenLineName(l) != args[0] {
					kept = append(kept, l)
				}
			}
			if len(kept) == len(lines) {
				return &exitError{code: 1, err: fmt.Errorf("no token named %s in %s", args[0], file)}
			}
			if err := writeTokenLines(file, kept, mode); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "leaseledger: token %s removed from %s (send SIGHUP to a running serve: its sessions end)\n", args[0], file)
			return nil
		},
	}
	cmd.AddCommand(add, list, remove)
	return cmd
}

// readTokenLines returns the lines of the token file at path (comments
// and blank lines included, so a rewrite keeps them) and its mode. The
// file is checked by gateway.LoadTokens first: a file serve would refuse
// is never edited.
func readTokenLines(path string) ([]string, fs.FileMode, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, tokenFileMode, err
	}
	if _, err := gateway.LoadTokens(path); err != nil {
		return nil, 0, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), gateway.MaxTokenFileBytes)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines, st.Mode().Perm(), sc.Err()
}

// tokenLineName is the name of a token line, "" for a comment or a blank
// line.
func tokenLineName(line string) string {
	f := gateway.TokenLineFields(line) // the gateway's own reading of a line
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// writeTokenLines replaces the file at path with lines: written to a
// temporary file beside it, checked with gateway.LoadTokens, synced, then
// renamed over it, so a serve reloading at any moment reads the old file
// or the new one, never half a line.
func writeTokenLines(path string, lines []string, mode fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the rename: nothing
	w := bufio.NewWriter(f)
	for _, l := range lines {
		w.WriteString(l)
		w.WriteByte('\n')
	}
	err = errors.Join(w.Flush(), f.Chmod(mode), f.Sync(), f.Close())
	if err != nil {
		return err
	}
	if _, err := gateway.LoadTokens(tmp); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
