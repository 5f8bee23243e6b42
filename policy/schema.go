package policy

import (
	_ "embed"

	"github.com/cedar-policy/cedar-go/types"
	"github.com/cedar-policy/cedar-go/x/exp/schema"
	"github.com/cedar-policy/cedar-go/x/exp/schema/validate"
)

// schemaFile is the name errors in the embedded schema carry.
const schemaFile = "schema.cedarschema"

// schemaText is the Cedar model of the access question; read-only.
//
//go:embed schema.cedarschema
var schemaText string

// Schema returns the Cedar schema (human-readable format) every policy
// and entities file is validated against: namespace Leaseledger, entity
// types Group, Principal, Server, Tool, Prompt and Resource, one action
// per events.AccessAction (its id is the value: Action::"call_tool"), and
// each action's context. docs/policy.md explains it; `leaseledger policy
// schema` prints it.
func Schema() string { return schemaText }

// The schema's entity types and action type, as Cedar names them.
const (
	typeGroup     types.EntityType = "Leaseledger::Group"
	typePrincipal types.EntityType = "Leaseledger::Principal"
	typeServer    types.EntityType = "Leaseledger::Server"
	typeTool      types.EntityType = "Leaseledger::Tool"
	typePrompt    types.EntityType = "Leaseledger::Prompt"
	typeResource  types.EntityType = "Leaseledger::Resource"
	typeAction    types.EntityType = "Leaseledger::Action"
)

// newValidator parses and resolves the embedded schema into a strict
// validator. It is built per Parse rather than once per process so that
// the package keeps no state; resolving the schema costs microseconds
// next to parsing a policy file.
func newValidator() (*validate.Validator, error) {
	var s schema.Schema
	s.SetFilename(schemaFile)
	if err := s.UnmarshalCedar([]byte(schemaText)); err != nil {
		return nil, &Error{File: schemaFile, Err: ErrSchema, cause: err}
	}
	r, err := s.Resolve()
	if err != nil {
		return nil, &Error{File: schemaFile, Err: ErrSchema, cause: err}
	}
	return validate.New(r, validate.WithStrict()), nil
}
