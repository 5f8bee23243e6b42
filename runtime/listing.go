package runtime

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"

	"github.com/leaseledger/leaseledger/events"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Listing bounds: a child's tools/list is read once, all pages, and refused
// (ErrListingTooLarge) beyond any of these.
const (
	// MaxListedTools bounds the tools pinned for one lease.
	MaxListedTools = 1024
	// MaxListingBytes bounds the canonical JSON of all listed tools.
	MaxListingBytes = 4 << 20
	// MaxListingPages bounds the tools/list pages followed.
	MaxListingPages = 64
)

// PinnedTool is one tool of a lease's pinned listing.
type PinnedTool struct {
	// Name is the exact runtime tool name.
	Name string
	// Digest is the tool's canonical schema digest (see ToolDigest).
	Digest string
	// Tool is the tool as listed. It is provider content: the host may show
	// it to a model, but it never enters errors or event kinds.
	Tool *mcp.Tool
}

// pinnedListing is the tool listing a lease pinned at acquisition.
type pinnedListing struct {
	Tools  map[string]PinnedTool
	Digest string // SHA-256 over the sorted "name\x00digest\n" lines
	Pages  int
	Bytes  int64
	// Unnamed counts listed tools whose names events.ValidToolName refuses:
	// they could not be named in call.* events, so they are not callable
	// through a lease.
	Unnamed int
}

// sorted returns the pinned tools sorted by name.
func (l *pinnedListing) sorted() []PinnedTool {
	out := make([]PinnedTool, 0, len(l.Tools))
	for _, t := range l.Tools {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ToolDigest is a tool's canonical schema digest: lowercase hex SHA-256 of
// the canonical JSON of {"name", "inputSchema", "outputSchema"}. Canonical
// JSON here is encoding/json's output for a value decoded with UseNumber
// (object keys sorted, numbers as written, no HTML escaping), so the same
// schema gives the same digest whichever side decoded it. A host computes
// the expected digest of the tool it authorized with this function.
func ToolDigest(t *mcp.Tool) (string, error) {
	b, err := toolCanonical(t)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

func toolCanonical(t *mcp.Tool) ([]byte, error) {
	in, err := canonicalJSON(t.InputSchema)
	if err != nil {
		return nil, err
	}
	out, err := canonicalJSON(t.OutputSchema)
	if err != nil {
		return nil, err
	}
	name, _ := json.Marshal(t.Name)
	var b bytes.Buffer
	b.WriteString(`{"inputSchema":`)
	b.Write(in)
	b.WriteString(`,"name":`)
	b.Write(name)
	b.WriteString(`,"outputSchema":`)
	b.Write(out)
	b.WriteByte('}')
	return b.Bytes(), nil
}

// canonicalJSON re-encodes v deterministically; nil becomes null.
func canonicalJSON(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(x); err != nil {
		return nil, err
	}
	return bytes.TrimRight(out.Bytes(), "\n"), nil
}

// fetchListing lists every page of tools once and pins them. Errors are
// ErrListing or ErrListingTooLarge kinds, without server text.
func fetchListing(ctx context.Context, cs *mcp.ClientSession) (*pinnedListing, error) {
	l := &pinnedListing{Tools: make(map[string]PinnedTool)}
	cursor := ""
	for {
		if l.Pages >= MaxListingPages {
			return nil, ErrListingTooLarge
		}
		res, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, ErrListing
		}
		l.Pages++
		for _, t := range res.Tools {
			if t == nil {
				continue
			}
			if len(l.Tools)+l.Unnamed >= MaxListedTools {
				return nil, ErrListingTooLarge
			}
			canon, err := toolCanonical(t)
			if err != nil {
				return nil, ErrListing
			}
			full, err := json.Marshal(t)
			if err != nil {
				return nil, ErrListing
			}
			l.Bytes += int64(len(full))
			if l.Bytes > MaxListingBytes {
				return nil, ErrListingTooLarge
			}
			if !events.ValidToolName(t.Name) {
				l.Unnamed++
				continue
			}
			if _, dup := l.Tools[t.Name]; dup {
				// Two tools with one name: a call could not say which it
				// authorized. Refuse the listing rather than pick one.
				return nil, ErrListing
			}
			sum := sha256.Sum256(canon)
			l.Tools[t.Name] = PinnedTool{Name: t.Name, Digest: hex.EncodeToString(sum[:]), Tool: t}
		}
		if res.NextCursor == "" {
			break
		}
		cursor = res.NextCursor
	}
	h := sha256.New()
	for _, t := range l.sorted() {
		h.Write([]byte(t.Name))
		h.Write([]byte{0})
		h.Write([]byte(t.Digest))
		h.Write([]byte{'\n'})
	}
	l.Digest = hex.EncodeToString(h.Sum(nil))
	return l, nil
}
