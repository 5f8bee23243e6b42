package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"github.com/cedar-policy/cedar-go/types"
	"github.com/cedar-policy/cedar-go/x/exp/schema/validate"
)

// errEntityType is the cause of an entity of a type the file may not
// hold.
var errEntityType = errors.New("only Leaseledger::Principal and Leaseledger::Group entities belong in the entities file: servers, tools, prompts and resources are built from each request")

// errDuplicateEntity is the cause of an entity listed twice.
var errDuplicateEntity = errors.New("listed twice")

// parseEntities reads an entities file: a JSON array of entities in
// Cedar's format ({"uid":{"type":…,"id":…},"attrs":{},"parents":[…]}),
// only Principal and Group entities, each conforming to the schema. Each
// element is decoded on its own so that an error names its line. Blank
// input is no entities.
func parseEntities(file string, b []byte, v *validate.Validator) (types.EntityMap, error) {
	out := types.EntityMap{}
	if len(bytes.TrimSpace(b)) == 0 {
		return out, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	at := func(off int64, kind error, uid string, cause error) *Error {
		line, col := lineCol(b, off)
		return &Error{File: file, Line: line, Column: col, Policy: uid, Err: kind, cause: cause}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, at(dec.InputOffset(), ErrSyntax, "", errors.New("want a JSON array of entities"))
	}
	for dec.More() {
		off := elementStart(b, dec.InputOffset())
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			var se *json.SyntaxError
			if errors.As(err, &se) {
				off = se.Offset // where the JSON breaks, not where the entity starts
			}
			return nil, at(off, ErrSyntax, "", err)
		}
		var e types.Entity
		if err := e.UnmarshalJSON(raw); err != nil {
			return nil, at(off, ErrEntities, "", err)
		}
		uid := e.UID.String()
		switch {
		case e.UID.Type != typePrincipal && e.UID.Type != typeGroup:
			return nil, at(off, ErrEntities, uid, errEntityType)
		case out[e.UID].UID == e.UID:
			return nil, at(off, ErrEntities, uid, errDuplicateEntity)
		}
		if err := v.Entity(e); err != nil {
			return nil, at(off, ErrEntities, uid, err)
		}
		out[e.UID] = e
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim(']') {
		return nil, at(dec.InputOffset(), ErrSyntax, "", errors.New("want the end of the array"))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, at(dec.InputOffset(), ErrSyntax, "", errors.New("data after the array"))
	}
	return out, nil
}

// elementStart skips the whitespace and the comma after off: the
// decoder's offset is the end of the previous token, the element starts
// after them.
func elementStart(b []byte, off int64) int64 {
	for off < int64(len(b)) {
		switch b[off] {
		case ' ', '\t', '\r', '\n', ',':
			off++
		default:
			return off
		}
	}
	return off
}

// lineCol returns the 1-based line and column (in bytes) of offset off.
func lineCol(b []byte, off int64) (line, col int) {
	if off > int64(len(b)) {
		off = int64(len(b))
	}
	head := b[:off]
	line = 1 + bytes.Count(head, []byte{'\n'})
	col = int(off) - bytes.LastIndexByte(head, '\n')
	return line, col
}
