package provider

// BuiltinSpecs returns the spec of each preset written as one, by name,
// for the tests of package provider_test.
func BuiltinSpecs() map[string]Spec {
	specs := map[string]Spec{}
	for _, b := range builtins() {
		specs[b.spec.Name] = b.spec
	}
	return specs
}
