/**
 * The names of everything a cluster of replicas keeps in Redis (docs/replicas.md), in one place so
 * that no two parts of the store pick clashing names. Every key of a cluster starts with
 * `mcp-store:{<cluster name>}:`: the braces are a Redis Cluster hash tag, so all of one cluster's
 * keys live in one slot and a Lua script may touch several of them.
 */
import { CLUSTER_NAME_PATTERN } from "../domain/replicas.js"

export { CLUSTER_NAME_PATTERN, parseServiceField, serviceField } from "../domain/replicas.js"

/** The key of `parts` in `cluster`: `clusterKey("prod", "defs")` is `mcp-store:{prod}:defs`. */
export const clusterKey = (cluster: string, ...parts: ReadonlyArray<string>): string => {
  if (!CLUSTER_NAME_PATTERN.test(cluster)) throw new Error(`invalid cluster name ${JSON.stringify(cluster)}`)
  return [`mcp-store:{${cluster}}`, ...parts].join(":")
}
