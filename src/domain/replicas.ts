/**
 * The names replica mode gives things, as plain values: what a cluster may be called (the options
 * check it, the Redis keys carry it) and the name a service goes by across replicas. Here, apart
 * from the Redis code, so that the options and the runtime need nothing of src/cluster.
 */

/** Cluster names: what `--cluster-name` accepts (they become part of every key). */
export const CLUSTER_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/

/** A scope as a service field names it (the shape of `Scope`). */
type FieldScope = { readonly kind: "store" } | { readonly kind: "agent"; readonly agentId: string }

/**
 * The name a service goes by in the cluster (its definition's hash field, its lease, its view):
 * `store/<name>` or `agent/<agent id>/<name>` (names and ids hold no `/`; an agent may be called
 * `store`, hence the `agent/` prefix).
 */
export const serviceField = (scope: FieldScope, name: string): string => (scope.kind === "store" ? `store/${name}` : `agent/${scope.agentId}/${name}`)

/** The scope and name of a `serviceField`, or undefined for anything else. */
export const parseServiceField = (field: string): { readonly scope: FieldScope; readonly name: string } | undefined => {
  const parts = field.split("/")
  if (parts[0] === "store" && parts.length === 2 && parts[1] !== "") return { scope: { kind: "store" }, name: parts[1] as string }
  if (parts[0] === "agent" && parts.length === 3 && parts[1] !== "" && parts[2] !== "") return { scope: { kind: "agent", agentId: parts[1] as string }, name: parts[2] as string }
  return undefined
}
