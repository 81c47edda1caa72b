//go:build tools

// Package tools pins cozyvalues-gen, the generator Cozystack's application charts run in
// `make generate` (values.yaml typedefs -> values.schema.json, README, Go types). The tests
// build it from this module (build.sh) and run it on the stand-in charts' values.yaml, so the
// schema they check is the one Cozystack's own generator writes.
package tools

import _ "github.com/cozystack/cozyvalues-gen"
