/**
 * The names of everything a cluster of replicas keeps in Redis (docs/replicas.md), in one place so
 * that no two parts of the store pick clashing names. Every key of a cluster starts with
 * `mcp-store:{<cluster name>}:`: the braces are a Redis Cluster hash tag, so all of one cluster's
 * keys live in one slot and a Lua script may touch several of them.
 */

/** Cluster names: what `--cluster-name` accepts (they become part of every key). */
export const CLUSTER_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/

/** The key of `parts` in `cluster`: `clusterKey("prod", "defs")` is `mcp-store:{prod}:defs`. */
export const clusterKey = (cluster: string, ...parts: ReadonlyArray<string>): string => {
  if (!CLUSTER_NAME_PATTERN.test(cluster)) throw new Error(`invalid cluster name ${JSON.stringify(cluster)}`)
  return [`mcp-store:{${cluster}}`, ...parts].join(":")
}

/**
 * The name a service goes by in the cluster (its definition's hash field, its lease, its view):
 * `store/<name>` or `agent/<agent id>/<name>` (names and ids hold no `/`; an agent may be called
 * `store`, hence the `agent/` prefix).
 */
export const serviceField = (scope: { readonly kind: "store" } | { readonly kind: "agent"; readonly agentId: string }, name: string): string =>
  scope.kind === "store" ? `store/${name}` : `agent/${scope.agentId}/${name}`

/** The scope and name of a `serviceField`, or undefined for anything else. */
export const parseServiceField = (field: string): { readonly scope: { readonly kind: "store" } | { readonly kind: "agent"; readonly agentId: string }; readonly name: string } | undefined => {
  const parts = field.split("/")
  if (parts[0] === "store" && parts.length === 2 && parts[1] !== "") return { scope: { kind: "store" }, name: parts[1] as string }
  if (parts[0] === "agent" && parts.length === 3 && parts[1] !== "" && parts[2] !== "") return { scope: { kind: "agent", agentId: parts[1] as string }, name: parts[2] as string }
  return undefined
}
