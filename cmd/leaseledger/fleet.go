package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"

	"github.com/leaseledger/leaseledger/collector"
	"github.com/leaseledger/leaseledger/events"
	"github.com/leaseledger/leaseledger/ledger"
)

// Fleet reads: with the global --fleet flag, --data-dir is a collector's
// directory (see 'collect') and audit, leases, export and verify run once
// per mirrored host, in host order (audit <activation>: on the hosts that
// hold it), then combine:
//   - text output: one section per host ("== host h1 ==") and a closing
//     "fleet:" line; a refused host's section names its finding;
//   - JSON output (--json): one object {"hosts":{"h1":<the host's JSON>},
//     "refused":{"h2":<finding>}};
//   - export: every line becomes {"host":"h1","event":<the stored bytes>},
//     streamed.
// A host whose command fails (verify's faults, audit's unconfirmed
// verdicts, a mirror that does not open) is listed as failed and the exit
// status is the highest of the hosts' statuses; the other hosts are still
// read. verify also fails, with exitRefused (or a host's higher status),
// when the collector refused a host, unless --allow-refused.
//
// While the collector runs it holds every mirror's lock: a --fleet read
// then fails at once with errCollectorRunning, naming the collector's fleet
// bus (collect_fleet.go), through which head, replay, tail and leases read
// each host with --nats URL --host-id h, and `tail --fleet --nats URL`
// follows every host (tailFleet).

// errCollectorRunning: a --fleet read found a mirror locked by the
// collector running on the directory.
var errCollectorRunning = errors.New("the collector is running")

// collectorRunning is the error of a --fleet read of command on dir whose
// mirror of host is locked (err): it names the fleet bus to read through.
func collectorRunning(dir, command, host string, err error) error {
	url := runningFleetBus(dir)
	if url == "" {
		url = "<its fleet bus URL, collect --port>"
	}
	return fmt.Errorf("--fleet %s: %w on %s and holds its mirrors: read through its fleet bus instead, "+
		"e.g. --nats %s --host-id %s with head, replay, tail or leases ('tail --fleet --nats %s' follows every host), or stop it: %w",
		command, errCollectorRunning, dir, url, host, url, err)
}

// fleetCommands are the commands --fleet applies to, and whether their
// output is streamed line by line (export) rather than one section per host.
var fleetCommands = map[string]bool{"audit": false, "leases": false, "verify": false, "export": true}

// wireFleet adds the global --fleet flag to root and routes the fleet
// commands through runFleet when it is set.
func wireFleet(a *app, root *cobra.Command) {
	fleet := new(bool)
	root.PersistentFlags().BoolVar(fleet, "fleet", false, "--data-dir is a collector directory: audit, leases, export and verify run per mirrored host and combined; "+
		"tail --fleet --nats URL follows every host of a running collector's fleet bus")
	for _, c := range root.Commands() {
		lines, ok := fleetCommands[c.Name()]
		if !ok || c.RunE == nil {
			continue
		}
		run := c.RunE
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if !*fleet {
				return run(cmd, args)
			}
			return a.runFleet(cmd, args, run, lines)
		}
	}
}

// fleetHosts lists the hosts mirrored in a collector directory.
func fleetHosts(dir string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(dir, collector.HostsDir))
	if err != nil {
		return nil, fmt.Errorf("--fleet: %s is not a collector directory: %w", dir, err)
	}
	var hosts []string
	for _, e := range ents {
		if e.IsDir() && events.ValidID(e.Name()) {
			hosts = append(hosts, e.Name())
		}
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("--fleet: %s mirrors no host", dir)
	}
	slices.Sort(hosts)
	return hosts, nil
}

// refusedFinding reads a host's REFUSED.json (collector.ReadFinding), nil
// when there is none; one that cannot be read is an unreadable finding.
func refusedFinding(hostDir string) *collector.Finding {
	f, err := collector.ReadFinding(hostDir)
	if err != nil {
		return &collector.Finding{Reason: collector.ReasonUnreadableFinding, Detail: err.Error()}
	}
	return f
}

func (a *app) runFleet(cmd *cobra.Command, args []string, run func(*cobra.Command, []string) error, lines bool) error {
	for _, name := range []string{"nats", "bundle"} {
		if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
			return fmt.Errorf("--fleet reads the collector directory --data-dir: it takes no --%s", name)
		}
	}
	hosts, err := fleetHosts(a.dataDir)
	if err != nil {
		return err
	}
	asJSON := false
	if f := cmd.Flags().Lookup("json"); f != nil && f.Value.String() == "true" {
		asJSON = true
	}
	root, stdout := a.dataDir, a.stdout
	defer func() { a.dataDir, a.stdout = root, stdout }()
	var (
		failed  []string
		code    int // the highest exit status of a host
		results = map[string]json.RawMessage{}
		refused = map[string]*collector.Finding{}
	)
	activation := ""
	if cmd.Name() == "audit" && len(args) == 1 {
		activation = args[0] // an activation lives on one host: the others have no section
	}
	audited := 0
	for _, h := range hosts {
		a.dataDir = collector.HostDir(root, h)
		if activation != "" {
			has, err := hasActivation(cmd.Context(), a, activation)
			if errors.Is(err, ledger.ErrLocked) {
				return collectorRunning(root, cmd.Name(), h, err)
			}
			if err != nil {
				return fmt.Errorf("--fleet: host %s: %w", h, err)
			}
			if !has {
				continue
			}
			audited++
		}
		if f := refusedFinding(a.dataDir); f != nil {
			refused[h] = f
		}
		var buf bytes.Buffer
		var lw *hostLineWriter
		if lines {
			lw = &hostLineWriter{w: stdout, prefix: fmt.Appendf(nil, `{"host":%q,"event":`, h)}
			a.stdout = lw
		} else {
			a.stdout = &buf
		}
		err := run(cmd, args)
		if errors.Is(err, ledger.ErrLocked) {
			return collectorRunning(root, cmd.Name(), h, err)
		}
		if lw != nil {
			if ferr := lw.flush(); err == nil {
				err = ferr
			}
		}
		if err != nil {
			failed = append(failed, h)
			code = max(code, exitCode(err))
			fmt.Fprintf(a.stderr, "leaseledger: host %s: %v\n", h, err)
		}
		switch {
		case lines:
		case asJSON:
			if v := bytes.TrimSpace(buf.Bytes()); json.Valid(v) {
				results[h] = v
			} else if err == nil {
				return fmt.Errorf("--fleet: host %s: the command's JSON output is not one JSON value", h)
			}
		default:
			fmt.Fprintf(stdout, "== host %s ==\n", h)
			if f := refused[h]; f != nil {
				fmt.Fprintf(stdout, "REFUSED by the collector: %s at seq %d (stored %s, offered %s, %s); the mirror holds what was verified before\n",
					f.Reason, f.Seq, f.Stored, f.Offered, f.Time.Format("2006-01-02T15:04:05Z07:00"))
			}
			stdout.Write(buf.Bytes())
			if err != nil {
				fmt.Fprintf(stdout, "error: %v\n", err)
			}
		}
	}
	if activation != "" && audited == 0 {
		return &exitError{code: 1, err: fmt.Errorf("--fleet: no events for activation %s on any of %d hosts", activation, len(hosts))}
	}
	switch {
	case lines:
	case asJSON:
		out := struct {
			Hosts   map[string]json.RawMessage    `json:"hosts"`
			Refused map[string]*collector.Finding `json:"refused,omitempty"`
			Failed  []string                      `json:"failed,omitempty"`
		}{results, refused, failed}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	default:
		fmt.Fprintf(stdout, "fleet: %d hosts, %d failed, %d refused by the collector\n", len(hosts), len(failed), len(refused))
	}
	var errs []error
	if len(failed) > 0 {
		errs = append(errs, fmt.Errorf("--fleet: %d of %d hosts failed: %v", len(failed), len(hosts), failed))
	}
	if gatesRefused(cmd) && len(refused) > 0 {
		// A CI gate on verify's exit status must see the one thing the
		// collector exists to catch (docs/fleet.md).
		names := slices.Sorted(maps.Keys(refused))
		code = max(code, exitRefused)
		errs = append(errs, fmt.Errorf("--fleet %s: %w: %d of %d hosts: %v (--allow-refused if they are expected)", cmd.Name(), errHostsRefused, len(refused), len(hosts), names))
	}
	if len(errs) > 0 {
		return &exitError{code: code, err: errors.Join(errs...)}
	}
	return nil
}

// exitRefused is the exit status of `--fleet verify` when the collector
// refused a host (unless --allow-refused), or higher when a host's own
// status is.
const exitRefused = 7

// errHostsRefused: a --fleet verify found hosts refused by the collector.
var errHostsRefused = errors.New("hosts refused by the collector")

// allowRefusedFlag is verify's flag saying refused hosts are expected.
const allowRefusedFlag = "allow-refused"

// gatesRefused says whether a refused host fails the fleet run of cmd:
// verify's, unless --allow-refused.
func gatesRefused(cmd *cobra.Command) bool {
	if cmd.Name() != "verify" {
		return false
	}
	f := cmd.Flags().Lookup(allowRefusedFlag)
	return f == nil || f.Value.String() != "true"
}

// hasActivation says whether the ledger in a.dataDir holds an event of
// activation id (an invalid id: true, so that the command says why).
func hasActivation(ctx context.Context, a *app, id string) (bool, error) {
	if !events.ValidID(id) {
		return true, nil
	}
	l, err := ledger.Open(ledger.Options{Dir: a.dataDir, Logger: a.logger, ReadOnly: true})
	if err != nil {
		return false, err
	}
	defer l.Close()
	found := errors.New("found")
	err = l.Scan(ctx, ledger.Query{Activation: id}, func(ledger.Seq, []byte) error { return found })
	if errors.Is(err, found) {
		return true, nil
	}
	return false, err
}

// exitCode is the exit status a command's error gives (1 unless it says
// otherwise, as audit's verdicts do).
func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// hostLineWriter writes each complete line it is given as
// prefix + line + "}\n": the host-keyed form of an exported event.
type hostLineWriter struct {
	w       io.Writer
	bw      *bufio.Writer
	prefix  []byte
	partial []byte // a line not yet ended
}

func (h *hostLineWriter) Write(p []byte) (int, error) {
	if h.bw == nil {
		h.bw = bufio.NewWriterSize(h.w, 256<<10)
	}
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			h.partial = append(h.partial, p...)
			break
		}
		h.bw.Write(h.prefix)
		h.bw.Write(h.partial)
		h.bw.Write(p[:i])
		if _, err := h.bw.WriteString("}\n"); err != nil {
			return 0, err
		}
		h.partial, p = h.partial[:0], p[i+1:]
	}
	return n, nil
}

func (h *hostLineWriter) flush() error {
	if len(h.partial) > 0 {
		return errors.New("--fleet: export ended inside a line")
	}
	if h.bw == nil {
		return nil
	}
	return h.bw.Flush()
}
