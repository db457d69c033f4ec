/**
 * The import rules `npm test` enforces (dependency-cruiser): no cycle between modules, and no arrow up
 * the layers of src/. A folder may import its own files and the folders of lower layers, never one of a
 * higher layer; the program's entry files at the root of src/ sit on top.
 */
const LAYERS = [
  ["domain"], // names, definitions, errors: no I/O
  ["logging"], // the one logger
  ["mcp", "redis"], // clients of the outside world: MCP upstreams, the cluster's Redis
  ["machines"], // the pure state machines
  ["config", "records"], // files and their Redis counterparts: definitions, keys, tokens, records
  ["runtime"], // the store: actors, its operations, the services it is built from, the standalone layers
  ["cluster"], // replica mode: leases, views, forwarding, the replica layers
  ["composition"], // the layer graph: standalone or replica, chosen once
  ["monitoring"], // figures, alerts, metrics over the store
  ["ui"], // the dashboard page and its script
  ["http"], // the REST API, the MCP gateway, the dashboard's routes
  ["cli"] // the subcommands
]
const rankOf = new Map(LAYERS.flatMap((names, rank) => names.map((name) => [name, rank])))
const above = (rank) => [...rankOf].filter(([, r]) => r > rank).map(([name]) => name)
const upward = [...rankOf].map(([name, rank]) => ({
  name: `no-arrow-up-from-${name}`,
  comment: `src/${name} may not import a folder of a higher layer`,
  severity: "error",
  from: { path: `^src/${name}/` },
  to: { path: above(rank).length === 0 ? "^$" : `^src/(${above(rank).join("|")})/` }
}))

module.exports = {
  forbidden: [
    { name: "no-circular", comment: "modules import each other in a cycle", severity: "error", from: {}, to: { circular: true } },
    {
      name: "no-import-of-entry-files",
      comment: "the entry files at the root of src/ are the top: nothing below imports them (version.ts is a constant)",
      severity: "error",
      from: { path: "^src/.+/" },
      to: { path: "^src/[^/]+\\.ts$", pathNot: "^src/version\\.ts$" }
    },
    {
      name: "no-unknown-folder",
      comment: "every folder of src/ has its place in the layers of .dependency-cruiser.cjs",
      severity: "error",
      from: { path: `^src/(?!(${[...rankOf.keys()].join("|")})/)[^/]+/` },
      to: {}
    },
    {
      name: "no-effect-platform-index",
      comment:
        "import @effect/platform's modules by path (@effect/platform/HttpRouter): its index re-exports every module, so code loaded on demand (Swagger UI, src/http/docs-page.ts) would be in the program's main chunk",
      severity: "error",
      from: { path: "^src/" },
      to: { path: "^node_modules/@effect/platform/dist/(esm|cjs)/index\\.js$" }
    },
    {
      name: "no-effect-platform-node-index",
      comment:
        "import @effect/platform-node's modules by path (@effect/platform-node/NodeHttpServer): its index brings NodeHttpClient and with it undici, a megabyte of JavaScript every start compiled for nothing",
      severity: "error",
      from: { path: "^src/" },
      to: { path: "^node_modules/@effect/platform-node/dist/(esm|cjs)/index\\.js$" }
    },
    {
      name: "redis-client-on-demand",
      comment: "the Redis client is loaded by src/redis/connection.ts with import(), in replica mode only: a store on its services file never loads it",
      severity: "error",
      from: { path: "^src/" },
      to: { path: "^node_modules/(redis|@redis/[^/]+)/", dependencyTypesNot: ["type-only", "dynamic-import"] }
    },
    {
      name: "faces-through-operations",
      comment:
        "a face (src/http) reaches the store's operations only through the four services of src/runtime/operations.ts (Calls, Catalog, Commands, Queries), taken once when it is built: never the rooms' modules themselves (their types are fine)",
      severity: "error",
      from: { path: "^src/http/" },
      to: { path: "^src/runtime/(calls|catalog|commands|queries)\\.ts$", dependencyTypesNot: ["type-only"] }
    },
    ...upward
  ],
  options: {
    tsConfig: { fileName: "tsconfig.json" },
    tsPreCompilationDeps: true,
    doNotFollow: { path: "node_modules" },
    // node_modules may be a link (a git worktree sharing another checkout's): its modules keep their paths under it.
    preserveSymlinks: true,
    // src/, and the dependencies the rules above are about (not followed further).
    includeOnly: ["^src/", "^node_modules/@effect/platform(-node)?/dist/(esm|cjs)/index\\.js$", "^node_modules/(redis|@redis/[^/]+)/"]
  }
}
