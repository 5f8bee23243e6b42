package main

import (
	"crypto/rand"
	"fmt"
	"os"
	"strings"

	"github.com/leaseledger/leaseledger/ledger"
	"github.com/leaseledger/leaseledger/ledger/verify"
	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"
)

func init() { extraCommands = append(extraCommands, newCheckpointCmd) }

func newCheckpointCmd(a *app) *cobra.Command {
	var (
		keyFile, origin string
		size            uint64
	)
	cmd := &cobra.Command{
		Use:   "checkpoint",
		Short: "Print a signed checkpoint (C2SP signed note) of the durable head or of its first --size events",
		Long: `checkpoint prints a signed tlog checkpoint of the ledger in --data-dir: the
origin, the number of events, the RFC 6962 Merkle root over their canonical
bytes and the hash chain value of the last one, signed with the key in --key
(made by 'checkpoint keygen'). Keep checkpoints outside the data directory;
'verify --checkpoint FILE --vkey KEY' later proves that the log still holds
exactly those events — which a hash chain alone cannot prove to someone who
distrusts whoever can write the directory. --size N signs the checkpoint of
the first N events instead of all of them (read from the Merkle node index:
O(log N)); 'prove' makes inclusion and consistency proofs against them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			skey, err := os.ReadFile(keyFile)
			if err != nil {
				return fmt.Errorf("--key: %w", err)
			}
			signer, err := note.NewSigner(strings.TrimSpace(string(skey)))
			if err != nil {
				return fmt.Errorf("--key: not a signer key: %w", err)
			}
			l, err := openReadOnly(a)
			if err != nil {
				return err
			}
			defer l.Close()
			at := l.Head().Seq
			if cmd.Flags().Changed("size") {
				if ledger.Seq(size) > at {
					return fmt.Errorf("--size %d: the log holds %d events", size, at)
				}
				at = ledger.Seq(size)
			}
			c, err := verify.CheckpointAt(cmd.Context(), l, origin, at)
			if err != nil {
				return err
			}
			signed, err := c.Sign(signer)
			if err != nil {
				return err
			}
			_, err = a.stdout.Write(signed)
			return err
		},
	}
	cmd.Flags().StringVar(&keyFile, "key", "", "file holding the signer key (from 'checkpoint keygen')")
	cmd.Flags().StringVar(&origin, "origin", "leaseledger", "the checkpoint's origin line: who keeps this log")
	cmd.Flags().Uint64Var(&size, "size", 0, "sign the checkpoint of the first N events (default: all, the durable head)")
	_ = cmd.MarkFlagRequired("key")

	var name, out string
	keygen := &cobra.Command{
		Use:   "keygen",
		Short: "Make a checkpoint signing key: the signer key goes to --out (mode 0600), the verifier key to stdout",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			skey, vkey, err := note.GenerateKey(rand.Reader, name)
			if err != nil {
				return err
			}
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			if _, err := fmt.Fprintln(f, skey); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, vkey)
			return nil
		},
	}
	keygen.Flags().StringVar(&name, "name", "leaseledger", "key name (part of every signature line)")
	keygen.Flags().StringVar(&out, "out", "", "file to create for the signer key (refused if it exists)")
	_ = keygen.MarkFlagRequired("out")
	cmd.AddCommand(keygen)
	return cmd
}

// readCheckpoints opens and signature-checks checkpoint files.
func readCheckpoints(files []string, vkey string) ([]verify.Checkpoint, error) {
	if len(files) == 0 {
		return nil, nil
	}
	if vkey == "" {
		return nil, fmt.Errorf("--checkpoint needs --vkey (the verifier key printed by 'checkpoint keygen')")
	}
	v, err := note.NewVerifier(strings.TrimSpace(vkey))
	if err != nil {
		return nil, fmt.Errorf("--vkey: %w", err)
	}
	var out []verify.Checkpoint
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--checkpoint: %w", err)
		}
		c, err := verify.ParseCheckpoint(b, v)
		if err != nil {
			return nil, fmt.Errorf("--checkpoint %s: %w", f, err)
		}
		out = append(out, c)
	}
	return out, nil
}
