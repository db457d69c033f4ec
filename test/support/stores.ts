/**
 * The set-up most integration files share, as one call: `useTestServers()` registers the hooks that
 * start the Streamable HTTP fixture once for the file (`httpFixture: true`, or the fixture server's
 * options for its optional tools), and end after each test
 * every store it started (`start`) and every resource handed to `defer` (streams, clients), so a file
 * keeps only what is its own. `useReplicaCluster()` does the same for a file whose replicas run in
 * its process on one Redis, `useReplicaProcesses()` for one whose replicas are store processes.
 */
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, afterEach, beforeAll } from "vitest"
import type { HttpFixture } from "../fixtures/http-fixture.js"
import type { FixtureServerOptions } from "../fixtures/fixture-server.js"
import { spawnStore, type StoreProcess, type StoreProcessOptions } from "./process.js"
import { startRedisServer, useReplicaSecret, type RedisServer } from "./redis.js"
import { freshDir, startTestServer, type TestServer, type TestServerOptions } from "./server.js"

export interface TestServers {
  /** The file's Streamable HTTP fixture (with `httpFixture: true`), started before the first test. */
  readonly fixture: HttpFixture
  /** The store the test started last (throws when it started none). */
  readonly server: TestServer
  /** Starts a store, cleaned up after the test. */
  start(options?: TestServerOptions): Promise<TestServer>
  /** Runs `release` after the test, before the stores close (newest first; failures ignored). */
  defer(release: () => unknown): void
}

/** Registers the hooks of a file that starts stores (and the HTTP fixture); call at the top of the file. */
export const useTestServers = (options: { readonly httpFixture?: boolean | FixtureServerOptions } = {}): TestServers => {
  let fixture: HttpFixture | undefined
  const servers: TestServer[] = []
  const releases: Array<() => unknown> = []
  const fixtureOptions = options.httpFixture
  if (fixtureOptions !== undefined && fixtureOptions !== false) {
    beforeAll(async () => {
      // Loaded here: a file without the fixture does not load the MCP server code.
      const { startHttpFixture } = await import("../fixtures/http-fixture.js")
      fixture = await startHttpFixture({ server: fixtureOptions === true ? {} : fixtureOptions })
    })
    afterAll(async () => {
      await fixture?.stop()
    })
  }
  afterEach(async () => {
    for (const release of releases.splice(0).reverse()) {
      try {
        await release()
      } catch {
        // a resource the test already ended
      }
    }
    await Promise.all(servers.splice(0).map((s) => s.cleanup()))
  })
  return {
    get fixture() {
      if (fixture === undefined) throw new Error("useTestServers: no HTTP fixture (httpFixture: true), or used before beforeAll")
      return fixture
    },
    get server() {
      const last = servers[servers.length - 1]
      if (last === undefined) throw new Error("useTestServers: no store started in this test")
      return last
    },
    start: async (serverOptions = {}) => {
      const server = await startTestServer(serverOptions)
      servers.push(server)
      return server
    },
    defer: (release) => void releases.push(release)
  }
}

export interface ReplicaCluster {
  /** The file's Redis (a real `redis-server`), started before the first test. */
  readonly redis: RedisServer
  /** The file's Streamable HTTP fixture, started before the first test. */
  readonly upstream: HttpFixture
  /**
   * Starts a replica in the test's process on the file's Redis (ended after the file), in cluster
   * `cluster`, on a fresh folder whose services file holds `services` when given.
   */
  replica(cluster: string, services?: unknown, options?: Readonly<Record<string, unknown>>): Promise<TestServer>
}

/**
 * Registers the hooks of a file that runs replicas in its own process: the replica secret set for
 * the file, a Redis and the HTTP fixture started once, and everything ended after the file (a
 * frozen Redis thawed first). Call at the top of a `describe.skipIf(!hasRedisServer)`; `upstream`
 * sets the fixture's options (its optional tools).
 */
export const useReplicaCluster = (setup: { readonly upstream?: FixtureServerOptions } = {}): ReplicaCluster => {
  const servers: TestServer[] = []
  const started = useFileParts("useReplicaCluster", setup.upstream ?? {}, async () => {
    await Promise.all(servers.splice(0).map((s) => s.cleanup()))
  })
  return Object.assign(started, {
    replica: async (cluster: string, services?: unknown, options: Readonly<Record<string, unknown>> = {}) => {
      const dir = freshDir()
      if (services !== undefined) writeFileSync(join(dir, "mcp.json"), JSON.stringify(services))
      const server = await startTestServer({ dir, options: { redis_url: started.redis.url, cluster_name: cluster, ...options } })
      servers.push(server)
      return server
    }
  })
}

/** What a file's hooks start before its first test: a Redis and the HTTP fixture. */
interface FileParts {
  redis?: RedisServer
  upstream?: HttpFixture
}

/**
 * Registers the hooks of a file of replicas: the replica secret set for the file, a Redis and the
 * HTTP fixture (`upstream`: its options) started once; after the file, a frozen Redis thawed, the
 * secret restored, the replicas ended (`end`), then Redis and the fixture. Answers them as the
 * file's tests read them: each throws when read before `beforeAll` started it.
 */
const useFileParts = (helper: string, upstream: FixtureServerOptions, end: () => Promise<void>): { readonly redis: RedisServer; readonly upstream: HttpFixture } => {
  const parts: FileParts = {}
  let restoreSecret: (() => void) | undefined
  beforeAll(async () => {
    restoreSecret = useReplicaSecret()
    const { startHttpFixture } = await import("../fixtures/http-fixture.js")
    ;[parts.redis, parts.upstream] = await Promise.all([startRedisServer(), startHttpFixture({ server: upstream })])
  })
  afterAll(async () => {
    parts.redis?.thaw()
    parts.redis?.disconnectAll()
    restoreSecret?.()
    await end()
    await Promise.all([parts.redis?.stop(), parts.upstream?.stop()])
  })
  const started = <T>(value: T | undefined, what: string): T => {
    if (value === undefined) throw new Error(`${helper}: ${what} used before beforeAll`)
    return value
  }
  return {
    get redis() {
      return started(parts.redis, "redis")
    },
    get upstream() {
      return started(parts.upstream, "upstream")
    }
  }
}

export interface ReplicaProcesses {
  /** The file's Redis (a real `redis-server`), started before the first test. */
  readonly redis: RedisServer
  /** The file's Streamable HTTP fixture, started before the first test. */
  readonly upstream: HttpFixture
  /**
   * Starts a replica as a store process (`spawnStore`) in the file's cluster, on a fresh folder whose
   * services file holds `services`, logging at `info` unless `logLevel` says otherwise; `redisUrl`
   * is another way to the file's Redis (a proxy's); `advertiseUrl` its `--advertise-url`; `cluster` another
   * cluster on the file's Redis than the file's. Ended after the file.
   */
  replica(services: object, options?: ReplicaProcessOptions): Promise<StoreProcess>
}

/** How `ReplicaProcesses.replica` starts one. */
export interface ReplicaProcessOptions {
  readonly logLevel?: string
  readonly redisUrl?: string
  readonly advertiseUrl?: string
  readonly cluster?: string
  /** Monitoring settings of the replica (`spawnStore`'s). */
  readonly monitoring?: StoreProcessOptions["monitoring"]
}

/**
 * Registers the hooks of a file whose replicas are store processes on one Redis, in cluster
 * `cluster` with lease time `leaseMs`: the replica secret set for the file, a Redis and the HTTP
 * fixture started once; after the file, each replica's output written to `$REPLICA_LOGS-<n>.log`
 * when that variable is set, every replica ended (one left stopped by SIGSTOP resumed first, a
 * frozen Redis thawed), then Redis and the fixture. Call at the top of a `describe.skipIf(!hasRedisServer)`.
 */
export const useReplicaProcesses = (setup: { readonly cluster: string; readonly leaseMs: number }): ReplicaProcesses => {
  const replicas: StoreProcess[] = []
  const started = useFileParts("useReplicaProcesses", {}, async () => {
    const logs = process.env["REPLICA_LOGS"]
    if (logs !== undefined) replicas.forEach((r, i) => writeFileSync(`${logs}-${i}.log`, r.output()))
    for (const r of replicas) r.child.kill("SIGCONT")
    await Promise.all(replicas.map((r) => r.kill()))
  })
  return Object.assign(started, {
    replica: async (services: object, options: ReplicaProcessOptions = {}) => {
      const dir = freshDir()
      writeFileSync(join(dir, "mcp.json"), JSON.stringify(services))
      const redisUrl = options.redisUrl ?? started.redis.url
      const extraArgs = ["--redis-url", redisUrl, "--cluster-name", options.cluster ?? setup.cluster, "--lease-ms", String(setup.leaseMs), "--log-level", options.logLevel ?? "info"]
      if (options.advertiseUrl !== undefined) extraArgs.push("--advertise-url", options.advertiseUrl)
      const replica = await spawnStore({ configFile: join(dir, "mcp.json"), extraArgs, ...(options.monitoring !== undefined ? { monitoring: options.monitoring } : {}) })
      replicas.push(replica)
      return replica
    }
  })
}
