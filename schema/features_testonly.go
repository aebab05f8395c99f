//go:build aerie_testfeature

package schema

// FeatureTestOnly is a feature only builds with the aerie_testfeature tag
// implement, so that a test can run two builds of one source, one of them
// lacking a feature the other has (`aerie produce --needs test-only`).
const FeatureTestOnly = "test-only"

func init() { implemented = append(implemented, FeatureTestOnly) }
