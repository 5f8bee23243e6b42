// Package policy is leaseledger's access policy: who may do what through
// the gateway, written in Cedar (github.com/cedar-policy/cedar-go). It owns
// the Cedar schema of that question (Schema: the principals, servers,
// tools, prompts and resources, the actions — exactly the
// events.AccessAction values — and their context), the loading of a policy
// file and an optional entities file into an immutable Set (every policy
// and entity validated against the schema, each error naming the file,
// line and policy), the digest that ties a decision recorded in the ledger
// to the exact text that made it, the decisions themselves (Set.Decide,
// with the ids of the deciding policies), the set in force and its
// per-session decision cache (Engine, SessionAccess), and operators'
// expectations (Case, Set.Test).
//
// Why Cedar: a Cedar policy set is validated against a schema before it
// is used, so a typo in an attribute or an action is a load error rather
// than a silent deny; its decisions name the policies that made them,
// which is what call.refused and access.decided record; and the language
// is small enough to analyse.
//
// The package decides; it records nothing. The runtime and the gateway ask
// it and append the facts (policy.loaded, call.admitted, call.refused,
// access.decided) with the digest Set.Digest returns. It imports only
// events and cedar-go and does no I/O except Load's two bounded reads.
package policy
