// Package k8s_test checks the Kubernetes manifests, the Dockerfile and the
// alert rules we ship, with the real parsers: the Kubernetes API types,
// kustomize, BuildKit's Dockerfile parser and Prometheus's rule loader. It
// is a module of its own so that those stay out of the sidecar's
// dependencies. Run it with `cd k8s && go test ./...` (make test does).
package k8s_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// The containers the checks look for.
const (
	sidecarName = "ratelimit-sidecar"
	envoyName   = "envoy"
)

// kinds are the kinds we ship, each with its typed API object. Decoding
// into these, failing on unknown fields, is what `kubectl apply
// --validate=strict` does with the server's schema.
var kinds = map[string]func() metav1.Object{
	"apps/v1/Deployment":                 func() metav1.Object { return &appsv1.Deployment{} },
	"v1/Service":                         func() metav1.Object { return &corev1.Service{} },
	"v1/ConfigMap":                       func() metav1.Object { return &corev1.ConfigMap{} },
	"networking.k8s.io/v1/NetworkPolicy": func() metav1.Object { return &networkingv1.NetworkPolicy{} },
}

// object is one decoded manifest document.
type object struct {
	source string // file#document, for messages
	kind   string
	obj    metav1.Object
}

// decodeManifests decodes every document of a manifest file strictly into
// its API type: unknown or duplicate fields and unknown kinds are errors.
func decodeManifests(source string, data []byte) ([]object, error) {
	var out []object
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		where := fmt.Sprintf("%s#%d", source, i)
		var any map[string]any
		if err := yaml.Unmarshal(doc, &any); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if len(any) == 0 {
			continue // only comments
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
		if !ok {
			return nil, fmt.Errorf("%s: kind %q of %q is not one this test knows; add it to kinds", where, tm.Kind, tm.APIVersion)
		}
		obj := newObj()
		if err := strictDecode(doc, obj); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", where, tm.Kind, err)
		}
		if obj.GetName() == "" {
			return nil, fmt.Errorf("%s: %s without metadata.name", where, tm.Kind)
		}
		out = append(out, object{source: where, kind: tm.Kind, obj: obj})
	}
}

// strictDecode decodes YAML into v as the API server decodes JSON: field
// names match case-sensitively, and unknown or duplicate fields are
// errors. (encoding/json, under sigs.k8s.io/yaml's UnmarshalStrict, matches
// names case-insensitively, so readOnlyRootFileSystem would pass.)
func strictDecode(doc []byte, v any) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(js, v)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// readKustomization decodes a kustomization.yaml strictly into kustomize's
// own type.
func readKustomization(data []byte) (*kustypes.Kustomization, error) {
	k := &kustypes.Kustomization{}
	if err := strictDecode(data, k); err != nil {
		return nil, fmt.Errorf("kustomization.yaml: %w", err)
	}
	return k, nil
}

// manifestFiles reads the kustomization in dir and the files it lists, and
// checks that it lists every manifest in dir and nothing that is missing.
func manifestFiles(dir string) (map[string][]byte, error) {
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	k, err := readKustomization(data)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"kustomization.yaml": data}
	var errs []error
	for _, r := range k.Resources {
		b, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			errs = append(errs, fmt.Errorf("kustomization.yaml: resources: %w", err))
			continue
		}
		files[r] = b
	}
	onDisk, err := filepath.Glob(filepath.Join(dir, "*.y*ml"))
	if err != nil {
		return nil, err
	}
	for _, f := range onDisk {
		if name := filepath.Base(f); !slices.Contains(k.Resources, name) && name != "kustomization.yaml" {
			errs = append(errs, fmt.Errorf("%s is not listed in kustomization.yaml resources", name))
		}
	}
	return files, errors.Join(errs...)
}

// decodeAll decodes every resource file of a file set.
func decodeAll(files map[string][]byte) ([]object, error) {
	k, err := readKustomization(files["kustomization.yaml"])
	if err != nil {
		return nil, err
	}
	var objs []object
	var errs []error
	for _, r := range k.Resources {
		o, err := decodeManifests(r, files[r])
		if err != nil {
			errs = append(errs, err)
		}
		objs = append(objs, o...)
	}
	return objs, errors.Join(errs...)
}

func TestManifestsDecodeStrictly(t *testing.T) {
	files, err := manifestFiles(".")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(files)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.kind+"/"+o.obj.GetName())
	}
	want := []string{
		"ConfigMap/edge-proxy-envoy",
		"ConfigMap/edge-proxy-ratelimit-rules",
		"Deployment/edge-proxy",
		"Service/edge-proxy",
		"Deployment/ratelimit-redis",
		"Service/ratelimit-redis",
		"NetworkPolicy/ratelimit-redis",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
}

func TestManifestsReferToEachOther(t *testing.T) {
	files, err := manifestFiles(".")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(files)
	if err != nil {
		t.Fatal(err)
	}
	if err := check(t, objs); err != nil {
		t.Error(err)
	}
}

// TestKustomizeBuild builds the kustomization as `kubectl apply -k` would
// and runs the same checks on what it would apply.
func TestKustomizeBuild(t *testing.T) {
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), ".")
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeManifests("kustomize build", out)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 7 {
		t.Errorf("kustomize built %d objects, want 7", len(objs))
	}
	if err := check(t, objs); err != nil {
		t.Error(err)
	}
}

// The broken copies in testdata are a comment line, then a manifest with
// one mistake: old replaced by new.
var brokenCopies = []struct {
	file, copy, old, new string
}{
	{file: "deployment.yaml", copy: "deployment.misspelled.yaml", old: "  replicas: 2", new: "  replica: 2"},
}

func TestBrokenCopiesAreOneMistakeAway(t *testing.T) {
	for _, tt := range brokenCopies {
		t.Run(tt.copy, func(t *testing.T) {
			orig, err := os.ReadFile(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join("testdata", tt.copy))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(orig), tt.old) {
				t.Fatalf("%s no longer contains %q", tt.file, tt.old)
			}
			header, rest, _ := strings.Cut(string(got), "\n")
			if !strings.HasPrefix(header, "# Broken on purpose") {
				t.Errorf("testdata/%s: first line %q, want a \"# Broken on purpose\" comment", tt.copy, header)
			}
			want := strings.Replace(string(orig), tt.old, tt.new, 1)
			if diff := cmp.Diff(want, rest); diff != "" {
				t.Errorf("testdata/%s is not %s with %q → %q (-want +got):\n%s", tt.copy, tt.file, tt.old, tt.new, diff)
			}
		})
	}
}

// edit is a change to one file of the shipped set.
type edit struct {
	file, old, new string
}

// fromCopy replaces a file by its broken copy in testdata.
func fromCopy(file, copy string) func(map[string][]byte) error {
	return func(files map[string][]byte) error {
		b, err := os.ReadFile(filepath.Join("testdata", copy))
		files[file] = b
		return err
	}
}

// replace replaces the first old in a file by new.
func replace(file, old, new string) func(map[string][]byte) error {
	return func(files map[string][]byte) error {
		if !bytes.Contains(files[file], []byte(old)) {
			return fmt.Errorf("%s does not contain %q", file, old)
		}
		files[file] = bytes.Replace(files[file], []byte(old), []byte(new), 1)
		return nil
	}
}

// shippedWith returns the shipped files with one change.
func shippedWith(t *testing.T, change func(map[string][]byte) error) map[string][]byte {
	t.Helper()
	files, err := manifestFiles(".")
	if err != nil {
		t.Fatal(err)
	}
	if err := change(files); err != nil {
		t.Fatal(err)
	}
	return files
}

func TestBrokenManifestsFailToDecode(t *testing.T) {
	tests := []struct {
		name string
		give func(map[string][]byte) error
		want string
	}{
		{
			name: "misspelled field",
			give: fromCopy("deployment.yaml", "deployment.misspelled.yaml"),
			want: `unknown field "spec.replica"`,
		},
		{
			name: "misspelled field in a container",
			give: replace("deployment.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true"),
			want: `unknown field "spec.template.spec.initContainers[0].securityContext.readOnlyRootFileSystem"`,
		},
		{
			name: "wrong type",
			give: replace("deployment.yaml", "replicas: 2", "replicas: two"),
			want: "cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32",
		},
		{
			name: "duplicate field",
			give: replace("service.yaml", "  ports:\n", "  ports: []\n  ports:\n"),
			want: `"ports" already set in map`,
		},
		{
			name: "unknown kind",
			give: replace("service.yaml", "kind: Service", "kind: Servce"),
			want: `kind "Servce" of "v1" is not one this test knows`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeAll(shippedWith(t, tt.give))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("decodeAll: got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestBrokenReferencesFail(t *testing.T) {
	tests := []struct {
		name string
		give edit
		want string
	}{
		{
			name: "ConfigMap volume of a missing ConfigMap",
			give: edit{"deployment.yaml", "name: edge-proxy-ratelimit-rules", "name: edge-proxy-rules"},
			want: `volume "rules": ConfigMap "edge-proxy-rules" is not in the manifests`,
		},
		{
			name: "probe on a port the container lacks",
			give: edit{"deployment.yaml", "port: rls-http", "port: rls-htp"},
			want: `container "ratelimit-sidecar": startupProbe: no container port named "rls-htp"`,
		},
		{
			name: "probe on a port number the container lacks",
			give: edit{"deployment.yaml", "port: rls-http", "port: 8081"},
			want: `container "ratelimit-sidecar": startupProbe: no container port 8081`,
		},
		{
			name: "rules mounted with subPath",
			give: edit{"deployment.yaml", "mountPath: /etc/ratelimit-sidecar\n", "mountPath: /etc/ratelimit-sidecar/rules.yaml\n              subPath: rules.yaml\n"},
			want: `mounts ConfigMap volume "rules" with subPath`,
		},
		{
			name: "config outside the rules mount",
			give: edit{"deployment.yaml", "--config=/etc/ratelimit-sidecar/", "--config=/etc/ratelimit/"},
			want: `--config=/etc/ratelimit/: /etc/ratelimit is not in a ConfigMap mount`,
		},
		{
			name: "config names a file the ConfigMap lacks",
			give: edit{"deployment.yaml", "--config=/etc/ratelimit-sidecar/", "--config=/etc/ratelimit-sidecar/limits.yaml"},
			want: `ConfigMap "edge-proxy-ratelimit-rules" has no key "limits.yaml"`,
		},
		{
			name: "HTTP on loopback",
			give: edit{"deployment.yaml", "--http-addr=0.0.0.0:8080", "--http-addr=127.0.0.1:8080"},
			want: "--http-addr=127.0.0.1:8080 is loopback: the kubelet's probes cannot reach it",
		},
		{
			name: "HTTP port not the probed one",
			give: edit{"deployment.yaml", "--http-addr=0.0.0.0:8080", "--http-addr=0.0.0.0:9090"},
			want: "startupProbe probes port 8080, but --http-addr listens on 9090",
		},
		{
			name: "gRPC port not Envoy's",
			give: edit{"deployment.yaml", "--grpc-addr=127.0.0.1:8081", "--grpc-addr=127.0.0.1:9091"},
			want: `Envoy's rate limit cluster "ratelimit" sends to 127.0.0.1:8081, but --grpc-addr is 127.0.0.1:9091`,
		},
		{
			name: "unknown flag",
			give: edit{"deployment.yaml", "--log-format=json", "--log-formt=json"},
			want: "unknown flag --log-formt",
		},
		{
			name: "divisor not the replica count",
			give: edit{"deployment.yaml", "--local-fallback-divisor=2", "--local-fallback-divisor=3"},
			want: "--local-fallback-divisor=3, but the Deployment has 2 replicas",
		},
		{
			name: "Redis host without a Service",
			give: edit{"deployment.yaml", "redis://ratelimit-redis:6379/0", "redis://redis:6379/0"},
			want: `--redis-url: no Service "redis" in the manifests`,
		},
		{
			name: "Redis port the Service lacks",
			give: edit{"deployment.yaml", "redis://ratelimit-redis:6379/0", "redis://ratelimit-redis:6380/0"},
			want: `--redis-url: Service "ratelimit-redis" has no port 6380`,
		},
		{
			name: "sidecar not native",
			give: edit{"deployment.yaml", "          restartPolicy: Always\n", ""},
			want: "ratelimit-sidecar must be a native sidecar: an init container with restartPolicy: Always",
		},
		{
			name: "sidecar without a startup probe",
			give: edit{"deployment.yaml", "          startupProbe:\n            httpGet:\n              path: /readyz\n              port: rls-http\n            periodSeconds: 1\n            failureThreshold: 30\n", ""},
			want: "ratelimit-sidecar needs a startupProbe",
		},
		{
			name: "writable root filesystem",
			give: edit{"deployment.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false"},
			want: `container "ratelimit-sidecar": securityContext.readOnlyRootFilesystem must be true`,
		},
		{
			name: "capabilities kept",
			give: edit{"redis.yaml", "drop: [ALL]", "drop: [NET_RAW]"},
			want: `container "redis": securityContext.capabilities.drop must include ALL`,
		},
		{
			name: "no memory limit",
			give: edit{"deployment.yaml", "              memory: 128Mi\n", ""},
			want: `container "ratelimit-sidecar": resources.limits.memory must be set`,
		},
		{
			name: "Envoy config key the ConfigMap lacks",
			give: edit{"deployment.yaml", "- /etc/envoy/envoy.yaml", "- /etc/envoy/bootstrap.yaml"},
			want: `ConfigMap "edge-proxy-envoy" has no key "bootstrap.yaml"`,
		},
		{
			name: "Envoy port without a listener",
			give: edit{"deployment.yaml", "containerPort: 10000", "containerPort: 10080"},
			want: "container port 10080 has no Envoy listener on a pod address",
		},
		{
			name: "Envoy without --concurrency",
			give: edit{"deployment.yaml", "            - --concurrency\n            - \"2\"\n", ""},
			want: "set --concurrency: Envoy otherwise starts a worker per CPU of the node",
		},
		{
			name: "Envoy with more workers than the sidecar takes connections",
			give: edit{"deployment.yaml", "            - --failure-mode=local\n", "            - --failure-mode=local\n            - --grpc-max-conns=2\n"},
			want: "--concurrency 2: each Envoy worker connects to the sidecar, which accepts 2 connections (--grpc-max-conns)",
		},
		{
			name: "Service port to a missing target",
			give: edit{"service.yaml", "targetPort: http", "targetPort: web"},
			want: `Service "edge-proxy": port "http": no container port named "web" in the pods it selects`,
		},
		{
			name: "Service selecting nothing",
			give: edit{"service.yaml", "    app.kubernetes.io/name: edge-proxy\n  ports", "    app.kubernetes.io/name: edge\n  ports"},
			want: `Service "edge-proxy": selects no Deployment's pods`,
		},
		{
			name: "NetworkPolicy admitting no one",
			give: edit{"redis.yaml", "              app.kubernetes.io/name: edge-proxy", "              app.kubernetes.io/name: envoy"},
			want: `NetworkPolicy "ratelimit-redis": ingress[0].from[0] selects no Deployment's pods`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := decodeAll(shippedWith(t, replace(tt.give.file, tt.give.old, tt.give.new)))
			if err != nil {
				t.Fatal(err)
			}
			err = check(t, objs)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("check: got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestKustomizationMustListEveryManifest(t *testing.T) {
	dir := t.TempDir()
	files, err := manifestFiles(".")
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if name == "kustomization.yaml" {
			b = bytes.Replace(b, []byte("  - service.yaml\n"), nil, 1)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err = manifestFiles(dir)
	if want := "service.yaml is not listed in kustomization.yaml resources"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("manifestFiles: got error %v, want one containing %q", err, want)
	}
}

// bundle indexes decoded objects by kind.
type bundle struct {
	deployments []*appsv1.Deployment
	services    map[string]*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	policies    []*networkingv1.NetworkPolicy
}

func index(objs []object) *bundle {
	b := &bundle{services: map[string]*corev1.Service{}, configMaps: map[string]*corev1.ConfigMap{}}
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *appsv1.Deployment:
			b.deployments = append(b.deployments, v)
		case *corev1.Service:
			b.services[v.Name] = v
		case *corev1.ConfigMap:
			b.configMaps[v.Name] = v
		case *networkingv1.NetworkPolicy:
			b.policies = append(b.policies, v)
		}
	}
	return b
}

// check checks what the API server would accept but the pod would get
// wrong: references between objects, probe and listen ports, the sidecar's
// flags against its mounts and Envoy's config, and the security baseline.
func check(t *testing.T, objs []object) error {
	t.Helper()
	b := index(objs)
	flags := sidecarFlags(t)
	var errs []error
	for _, d := range b.deployments {
		errs = append(errs, checkDeployment(b, d, flags)...)
	}
	for _, name := range sortedKeys(b.services) {
		errs = append(errs, checkService(b, b.services[name])...)
	}
	for _, p := range b.policies {
		errs = append(errs, checkPolicy(b, p)...)
	}
	return errors.Join(errs...)
}

func checkDeployment(b *bundle, d *appsv1.Deployment, flags map[string]bool) []error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("Deployment %q: "+format, append([]any{d.Name}, args...)...))
	}
	spec := &d.Spec.Template.Spec
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		fail("selector: %v", err)
	} else if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		fail("selector does not match the pod template's labels")
	}

	volumes := map[string]*corev1.Volume{}
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		volumes[v.Name] = v
		cmv := v.ConfigMap
		if cmv == nil {
			continue
		}
		cm, ok := b.configMaps[cmv.Name]
		switch {
		case !ok && (cmv.Optional == nil || !*cmv.Optional):
			fail("volume %q: ConfigMap %q is not in the manifests", v.Name, cmv.Name)
		case ok:
			for _, it := range cmv.Items {
				if _, ok := cm.Data[it.Key]; !ok {
					fail("volume %q: ConfigMap %q has no key %q", v.Name, cmv.Name, it.Key)
				}
			}
		}
	}

	var all []*corev1.Container
	for i := range spec.InitContainers {
		all = append(all, &spec.InitContainers[i])
	}
	for i := range spec.Containers {
		all = append(all, &spec.Containers[i])
	}
	for _, c := range all {
		for _, err := range checkContainer(spec, c, volumes) {
			fail("container %q: %v", c.Name, err)
		}
	}

	// The sidecar and Envoy, if this is their pod.
	sidecar, native := findContainer(spec, sidecarName)
	envoy, _ := findContainer(spec, envoyName)
	if sidecar == nil {
		return errs
	}
	if !native {
		fail("%s must be a native sidecar: an init container with restartPolicy: Always", sidecarName)
	}
	if sidecar.StartupProbe == nil {
		fail("%s needs a startupProbe: without one the kubelet starts Envoy before the sidecar is ready", sidecarName)
	}
	if len(sidecar.Command) > 0 {
		fail("%s: set args, not command, so the image's entrypoint runs", sidecarName)
	}
	args, err := parseArgs(flags, sidecar.Args)
	if err != nil {
		fail("%s args: %v", sidecarName, err)
		return errs
	}
	for _, err := range checkSidecarArgs(b, d, sidecar, volumes, args) {
		fail("%s: %v", sidecarName, err)
	}
	if envoy == nil {
		fail("no %s container: who calls the sidecar?", envoyName)
		return errs
	}
	cfg, err := envoyBootstrap(b, envoy, volumes)
	if err != nil {
		fail("%s: %v", envoyName, err)
		return errs
	}
	for _, err := range checkEnvoy(cfg, envoy, args) {
		fail("%s: %v", envoyName, err)
	}
	return errs
}

// findContainer returns the container of that name and whether it is a
// native sidecar.
func findContainer(spec *corev1.PodSpec, name string) (*corev1.Container, bool) {
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		if c.Name == name {
			return c, c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		}
	}
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i], false
		}
	}
	return nil, false
}

func checkContainer(pod *corev1.PodSpec, c *corev1.Container, volumes map[string]*corev1.Volume) []error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	for _, m := range c.VolumeMounts {
		v, ok := volumes[m.Name]
		switch {
		case !ok:
			fail("volumeMount %q: no such volume", m.Name)
		case v.ConfigMap != nil && (m.SubPath != "" || m.SubPathExpr != ""):
			// The kubelet never updates a subPath mount, so the sidecar
			// would never see a changed rule.
			fail("mounts ConfigMap volume %q with subPath: changes would never reach the container", m.Name)
		}
	}

	probes := []struct {
		name string
		p    *corev1.Probe
	}{{"startupProbe", c.StartupProbe}, {"readinessProbe", c.ReadinessProbe}, {"livenessProbe", c.LivenessProbe}}
	for _, pr := range probes {
		if pr.p == nil {
			continue
		}
		port, ok := probePort(pr.p)
		if !ok {
			continue // exec probes
		}
		if _, err := containerPort(c, port); err != nil {
			fail("%s: %v", pr.name, err)
		}
	}
	if c.ReadinessProbe == nil {
		fail("needs a readinessProbe")
	}
	if c.LivenessProbe == nil {
		fail("needs a livenessProbe")
	}

	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	nonRoot := sc.RunAsNonRoot
	if nonRoot == nil && pod.SecurityContext != nil {
		nonRoot = pod.SecurityContext.RunAsNonRoot
	}
	if nonRoot == nil || !*nonRoot {
		fail("securityContext.runAsNonRoot must be true")
	}
	if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
		fail("securityContext.runAsUser must not be 0")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		fail("securityContext.readOnlyRootFilesystem must be true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		fail("securityContext.allowPrivilegeEscalation must be false")
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		fail("securityContext.capabilities.drop must include ALL")
	}
	if sc.Privileged != nil && *sc.Privileged {
		fail("securityContext.privileged must not be set")
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			fail("resources.requests.%s must be set", r)
		}
		if _, ok := c.Resources.Limits[r]; !ok {
			fail("resources.limits.%s must be set", r)
		}
	}
	return errs
}

func probePort(p *corev1.Probe) (intstr.IntOrString, bool) {
	switch {
	case p.HTTPGet != nil:
		return p.HTTPGet.Port, true
	case p.TCPSocket != nil:
		return p.TCPSocket.Port, true
	case p.GRPC != nil:
		return intstr.FromInt32(p.GRPC.Port), true
	}
	return intstr.IntOrString{}, false
}

// containerPort resolves a port by name or number among c's ports.
func containerPort(c *corev1.Container, port intstr.IntOrString) (int32, error) {
	for _, p := range c.Ports {
		if port.Type == intstr.String && p.Name == port.StrVal || port.Type == intstr.Int && p.ContainerPort == port.IntVal {
			return p.ContainerPort, nil
		}
	}
	if port.Type == intstr.String {
		return 0, fmt.Errorf("no container port named %q", port.StrVal)
	}
	return 0, fmt.Errorf("no container port %d", port.IntVal)
}

// mountedConfigMap finds the ConfigMap mount that holds file path p: the
// mount itself (a directory of rule files) or one of its keys.
func mountedConfigMap(b *bundle, c *corev1.Container, volumes map[string]*corev1.Volume, p string) (cm *corev1.ConfigMap, key string, err error) {
	p = path.Clean(p)
	for _, m := range c.VolumeMounts {
		v := volumes[m.Name]
		if v == nil || v.ConfigMap == nil {
			continue
		}
		dir := path.Clean(m.MountPath)
		rel, ok := strings.CutPrefix(p, dir)
		if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
			continue
		}
		cm := b.configMaps[v.ConfigMap.Name]
		if cm == nil {
			return nil, "", fmt.Errorf("ConfigMap %q is not in the manifests", v.ConfigMap.Name)
		}
		key := strings.TrimPrefix(rel, "/")
		if strings.Contains(key, "/") {
			return nil, "", fmt.Errorf("%s is below a ConfigMap mount, whose keys are flat", p)
		}
		if _, ok := cm.Data[key]; key != "" && !ok {
			return nil, "", fmt.Errorf("ConfigMap %q has no key %q", cm.Name, key)
		}
		return cm, key, nil
	}
	return nil, "", fmt.Errorf("%s is not in a ConfigMap mount", p)
}

func checkSidecarArgs(b *bundle, d *appsv1.Deployment, c *corev1.Container, volumes map[string]*corev1.Volume, args map[string]string) []error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	// The rules: a ConfigMap mounted as a directory, or one key of it.
	if cfg, ok := args["config"]; !ok {
		fail("set --config to the rules ConfigMap's mount")
	} else if cm, key, err := mountedConfigMap(b, c, volumes, cfg); err != nil {
		fail("--config=%s: %v", cfg, err)
	} else if key == "" && !slices.ContainsFunc(sortedKeys(cm.Data), isRuleFile) {
		fail("--config=%s: ConfigMap %q has no .yaml or .yml key to read", cfg, cm.Name)
	}

	// Probes and Prometheus reach the HTTP port on the pod's address.
	if addr, ok := args["http-addr"]; !ok {
		fail("set --http-addr: its default is loopback, out of the kubelet's reach")
	} else if _, port, loopback, err := splitAddr(addr); err != nil {
		fail("--http-addr=%s: %v", addr, err)
	} else {
		if loopback {
			fail("--http-addr=%s is loopback: the kubelet's probes cannot reach it", addr)
		}
		for _, pr := range []struct {
			name string
			p    *corev1.Probe
		}{{"startupProbe", c.StartupProbe}, {"readinessProbe", c.ReadinessProbe}, {"livenessProbe", c.LivenessProbe}} {
			if pr.p == nil || pr.p.HTTPGet == nil {
				continue
			}
			if n, err := containerPort(c, pr.p.HTTPGet.Port); err == nil && int(n) != port {
				fail("%s probes port %d, but --http-addr listens on %d", pr.name, n, port)
			}
		}
	}

	// While Redis is away, each replica takes its share of every limit.
	mode, ok := args["failure-mode"]
	if !ok || mode == "local" {
		div := 1
		if v, ok := args["local-fallback-divisor"]; ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				fail("--local-fallback-divisor=%s: %v", v, err)
			}
			div = n
		}
		replicas := 1
		if d.Spec.Replicas != nil {
			replicas = int(*d.Spec.Replicas)
		}
		if div != replicas {
			fail("--local-fallback-divisor=%d, but the Deployment has %d replicas: in failure mode local the replicas together would admit %d/%d of each limit", div, replicas, replicas, div)
		}
	}

	// Redis through a Service of ours.
	if raw, ok := args["redis-url"]; ok {
		errs = append(errs, checkRedisURL(b, raw)...)
	}
	return errs
}

func isRuleFile(name string) bool {
	return !strings.HasPrefix(name, ".") && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml"))
}

func checkRedisURL(b *bundle, raw string) []error {
	u, err := url.Parse(raw)
	if err != nil {
		return []error{fmt.Errorf("--redis-url: %v", err)}
	}
	host := u.Hostname()
	name, _, _ := strings.Cut(host, ".") // svc, svc.ns, svc.ns.svc.cluster.local
	svc, ok := b.services[name]
	if !ok {
		return []error{fmt.Errorf("--redis-url: no Service %q in the manifests", name)}
	}
	port := 6379
	if p := u.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil {
			return []error{fmt.Errorf("--redis-url: port: %v", err)}
		}
	}
	for _, p := range svc.Spec.Ports {
		if int(p.Port) == port {
			return nil
		}
	}
	return []error{fmt.Errorf("--redis-url: Service %q has no port %d", name, port)}
}

// envoyConfig is what the checks need of an Envoy bootstrap.
type envoyConfig struct {
	listeners  map[int]string // port → address
	clusters   map[string][]string
	rlsCluster string
}

// envoyBootstrap reads the bootstrap Envoy is started with from its
// ConfigMap. examples/envoy/envoy_test.go validates the same file against
// Envoy's protos; here only addresses and ports matter.
func envoyBootstrap(b *bundle, c *corev1.Container, volumes map[string]*corev1.Volume) (*envoyConfig, error) {
	var p string
	all := append(slices.Clone(c.Command), c.Args...)
	for i, a := range all {
		switch {
		case (a == "-c" || a == "--config-path") && i+1 < len(all):
			p = all[i+1]
		case strings.HasPrefix(a, "--config-path="):
			p = strings.TrimPrefix(a, "--config-path=")
		}
	}
	if p == "" {
		return nil, errors.New("no --config-path in command or args")
	}
	cm, key, err := mountedConfigMap(b, c, volumes, p)
	if err != nil {
		return nil, fmt.Errorf("--config-path %s: %w", p, err)
	}
	if key == "" {
		return nil, fmt.Errorf("--config-path %s: names the mount, not a file in it", p)
	}
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data[key]), &doc); err != nil {
		return nil, fmt.Errorf("ConfigMap %q key %q: %w", cm.Name, key, err)
	}
	cfg := &envoyConfig{listeners: map[int]string{}, clusters: map[string][]string{}}
	sr := get(doc, "static_resources")
	for _, l := range list(get(sr, "listeners")) {
		sa := get(l, "address", "socket_address")
		port, _ := get(sa, "port_value").(float64)
		addr, _ := get(sa, "address").(string)
		cfg.listeners[int(port)] = addr
	}
	for _, cl := range list(get(sr, "clusters")) {
		name, _ := get(cl, "name").(string)
		for _, e := range list(get(cl, "load_assignment", "endpoints")) {
			for _, lb := range list(get(e, "lb_endpoints")) {
				sa := get(lb, "endpoint", "address", "socket_address")
				port, _ := get(sa, "port_value").(float64)
				addr, _ := get(sa, "address").(string)
				cfg.clusters[name] = append(cfg.clusters[name], fmt.Sprintf("%s:%d", addr, int(port)))
			}
		}
	}
	walk(doc, func(m map[string]any) {
		if rls, ok := m["rate_limit_service"]; ok {
			cfg.rlsCluster, _ = get(rls, "grpc_service", "envoy_grpc", "cluster_name").(string)
		}
	})
	return cfg, nil
}

func checkEnvoy(cfg *envoyConfig, c *corev1.Container, sidecarArgs map[string]string) []error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	// Every port the pod exposes for Envoy is a listener on the pod's
	// address, not on loopback.
	for _, p := range c.Ports {
		addr, ok := cfg.listeners[int(p.ContainerPort)]
		if _, _, loopback, _ := splitAddr(fmt.Sprintf("%s:%d", addr, p.ContainerPort)); !ok || loopback {
			fail("container port %d has no Envoy listener on a pod address", p.ContainerPort)
		}
	}
	// Envoy's rate limit cluster is the sidecar's gRPC address.
	grpc := sidecarArgs["grpc-addr"]
	if grpc == "" {
		grpc = "127.0.0.1:8081" // the sidecar's default
	}
	_, port, _, err := splitAddr(grpc)
	if err != nil {
		fail("--grpc-addr=%s: %v", grpc, err)
		return errs
	}
	eps := cfg.clusters[cfg.rlsCluster]
	if cfg.rlsCluster == "" || len(eps) == 0 {
		fail("no rate_limit_service cluster with endpoints in Envoy's config")
	}
	for _, ep := range eps {
		_, p, loopback, err := splitAddr(ep)
		if err != nil || !loopback || p != port {
			fail("Envoy's rate limit cluster %q sends to %s, but --grpc-addr is %s", cfg.rlsCluster, ep, grpc)
		}
	}
	// Each Envoy worker keeps its own connections to the sidecar, and
	// without --concurrency Envoy starts a worker per CPU of the node.
	maxConns := 64 // the sidecar's default
	if v, ok := sidecarArgs["grpc-max-conns"]; ok {
		if maxConns, err = strconv.Atoi(v); err != nil {
			fail("--grpc-max-conns=%s: %v", v, err)
			return errs
		}
	}
	workers, err := envoyConcurrency(c)
	switch {
	case err != nil:
		fail("%v", err)
	case workers == 0:
		fail("set --concurrency: Envoy otherwise starts a worker per CPU of the node, each with its own connections to the sidecar, which accepts %d (--grpc-max-conns)", maxConns)
	case maxConns > 0 && workers >= maxConns:
		fail("--concurrency %d: each Envoy worker connects to the sidecar, which accepts %d connections (--grpc-max-conns)", workers, maxConns)
	}
	return errs
}

// envoyConcurrency returns the --concurrency Envoy is started with, or 0.
func envoyConcurrency(c *corev1.Container) (int, error) {
	all := append(slices.Clone(c.Command), c.Args...)
	for i, a := range all {
		v, ok := strings.CutPrefix(a, "--concurrency=")
		if a == "--concurrency" && i+1 < len(all) {
			v, ok = all[i+1], true
		}
		if ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return 0, fmt.Errorf("--concurrency %s: want a number of workers, 1 or more", v)
			}
			return n, nil
		}
	}
	return 0, nil
}

// selected returns the pod specs of the Deployments whose pods sel selects.
func selected(b *bundle, sel labels.Selector) []*corev1.PodSpec {
	var out []*corev1.PodSpec
	for _, d := range b.deployments {
		if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			out = append(out, &d.Spec.Template.Spec)
		}
	}
	return out
}

// podPort resolves a port by name or number in any container of the pods.
func podPort(pods []*corev1.PodSpec, port intstr.IntOrString) error {
	var err error
	for _, spec := range pods {
		for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
			for i := range cs {
				if _, err = containerPort(&cs[i], port); err == nil {
					return nil
				}
			}
		}
	}
	if port.Type == intstr.String {
		return fmt.Errorf("no container port named %q in the pods it selects", port.StrVal)
	}
	return fmt.Errorf("no container port %d in the pods it selects", port.IntVal)
}

func checkService(b *bundle, s *corev1.Service) []error {
	var errs []error
	if len(s.Spec.Selector) == 0 {
		return []error{fmt.Errorf("Service %q: no selector", s.Name)}
	}
	pods := selected(b, labels.SelectorFromSet(s.Spec.Selector))
	if len(pods) == 0 {
		return []error{fmt.Errorf("Service %q: selects no Deployment's pods", s.Name)}
	}
	for _, p := range s.Spec.Ports {
		target := p.TargetPort
		if target.Type == intstr.Int && target.IntVal == 0 {
			target = intstr.FromInt32(p.Port)
		}
		if err := podPort(pods, target); err != nil {
			errs = append(errs, fmt.Errorf("Service %q: port %q: %v", s.Name, p.Name, err))
		}
	}
	return errs
}

func checkPolicy(b *bundle, np *networkingv1.NetworkPolicy) []error {
	var errs []error
	fail := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("NetworkPolicy %q: "+format, append([]any{np.Name}, a...)...))
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		fail("podSelector: %v", err)
		return errs
	}
	pods := selected(b, sel)
	if len(pods) == 0 {
		fail("podSelector selects no Deployment's pods")
	}
	for i, in := range np.Spec.Ingress {
		for j, from := range in.From {
			if from.PodSelector == nil || from.NamespaceSelector != nil {
				continue
			}
			s, err := metav1.LabelSelectorAsSelector(from.PodSelector)
			if err != nil {
				fail("ingress[%d].from[%d]: %v", i, j, err)
			} else if len(selected(b, s)) == 0 {
				fail("ingress[%d].from[%d] selects no Deployment's pods", i, j)
			}
		}
		for j, p := range in.Ports {
			if p.Port == nil {
				continue
			}
			if err := podPort(pods, *p.Port); err != nil {
				fail("ingress[%d].ports[%d]: %v", i, j, err)
			}
		}
	}
	return errs
}

// get follows keys through nested maps; nil if any is missing.
func get(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

// walk calls fn for every map in v, depth first.
func walk(v any, fn func(map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		fn(v)
		for _, k := range sortedKeys(v) {
			walk(v[k], fn)
		}
	case []any:
		for _, e := range v {
			walk(e, fn)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
