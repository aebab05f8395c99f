// Package check validates aerie's deployment files offline, as part of
// `make test` (target deploy-check): the container image definition
// (Dockerfile, parsed by BuildKit's parser, and the static binary it
// builds), the compose demo (loaded and schema-checked by compose-go) and
// the Kubernetes manifests (rendered by kustomize and validated by
// kubeconform against the committed schemas in deploy/kubernetes/schemas,
// strict, with no network), the NATS chart values (the route credentials
// parsed by nats-server), the NetworkPolicies, evaluated on the
// connections aerie needs and on some it must not get, and the metrics
// wiring: every worker and aggregator serving --metrics-listen on a
// named port that its Service and the optional PodMonitor name, and the
// PrometheusRule equal to deploy/prometheus/aerie-rules.yml.
//
// The rehearsals (TestComposeRehearsal, TestKubernetesRehearsal) then run
// what the compose file and the standalone overlay say, as local
// processes of a freshly built aerie against an in-process nats-server
// with the deployment's users.conf, and require a complete run with no
// permission violation; rehearse_test.go lists what they rewrite. -short
// skips them.
//
// It is a module of its own so that these tools stay out of aerie's
// go.mod: aerie's binary depends on none of them.
package check
