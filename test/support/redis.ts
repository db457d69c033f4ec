/**
 * A real Redis server for the replica tests: Debian's `redis-server` started by the test on a free
 * loopback port, with no persistence (`--save '' --appendonly no`), so a stop loses everything it
 * held, as the fault tests want. `.ci/run` installs redis-server and requires it; a plain `npm test`
 * without it skips the tests that need it (`hasRedisServer`, requirements.ts).
 */
import { spawn, type ChildProcess } from "node:child_process"
import { createConnection, createServer, type Socket } from "node:net"
import { createClient, type RedisClientType } from "redis"
import { clusterKey } from "../../src/redis/key-names.js"
import { installed, missingError, runsWith } from "./requirements.js"
import { closedPort } from "./server.js"
import { eventually } from "./wait.js"

/**
 * True when the Redis tests run: `redis-server` can be started on this machine, or the run requires it
 * (MCPSTORE_TEST_REQUIRE=redis), so that its absence fails them instead of skipping them.
 */
export const hasRedisServer: boolean = runsWith("redis")

export interface RedisServer {
  /** `redis://127.0.0.1:<port>`, what `--redis-url` takes. */
  readonly url: string
  readonly port: number
  /** The running server's pid (changes on restart). */
  pid(): number
  /** Stops it (SIGTERM, or SIGKILL with `kill: true`) and waits for the exit; idempotent. */
  stop(options?: { readonly kill?: boolean }): Promise<void>
  /** Starts it again on the same port, empty (no persistence); resolves once it accepts connections. */
  start(): Promise<void>
  /** Freezes the process (SIGSTOP): a hung Redis, its connections open and unanswered, not closed. */
  freeze(): void
  /** Resumes a frozen process (SIGCONT); idempotent. */
  thaw(): void
  /** A connected node-redis client (errors ignored: tests stop the server under it), kept in `clients`. */
  connect(): Promise<RedisClientType>
  /** The clients `connect` made and `disconnectAll` has not destroyed yet, oldest first. */
  readonly clients: ReadonlyArray<RedisClientType>
  /** Destroys every client `connect` made (for `afterEach`). */
  disconnectAll(): void
}

const accepts = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const socket = createConnection({ host: "127.0.0.1", port })
    socket.once("connect", () => {
      socket.destroy()
      resolve(true)
    })
    socket.once("error", () => resolve(false))
  })

/** Starts a redis-server on a free loopback port; stop it in `afterAll` (`stop()`). */
export const startRedisServer = async (): Promise<RedisServer> => {
  if (!installed("redis")) throw missingError("redis")
  const port = await closedPort()
  let child: ChildProcess | undefined
  let exited: Promise<void> = Promise.resolve()
  let output = ""
  const start = async () => {
    if (child !== undefined) return
    output = ""
    const c = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "yes"], {
      stdio: ["ignore", "pipe", "pipe"]
    })
    c.stdout?.on("data", (b: Buffer) => (output = (output + b.toString("utf8")).slice(-4096)))
    c.stderr?.on("data", (b: Buffer) => (output = (output + b.toString("utf8")).slice(-4096)))
    child = c
    exited = new Promise((resolve) =>
      c.once("exit", () => {
        if (child === c) child = undefined
        resolve()
      })
    )
    const up = await eventually(async () => child === undefined || (await accepts(port)), 10_000, 20)
    if (child === undefined || !up) {
      await stop({ kill: true })
      throw new Error(`redis-server did not start on port ${port}:\n${output}`)
    }
  }
  const stop = async (options: { readonly kill?: boolean } = {}) => {
    const c = child
    if (c === undefined) return
    // A frozen process takes no SIGTERM until it runs again.
    c.kill("SIGCONT")
    c.kill(options.kill === true ? "SIGKILL" : "SIGTERM")
    await exited
  }
  await start()
  const url = `redis://127.0.0.1:${port}`
  const clients: RedisClientType[] = []
  return {
    url,
    port,
    pid: () => child?.pid ?? -1,
    stop,
    start,
    freeze: () => void child?.kill("SIGSTOP"),
    thaw: () => void child?.kill("SIGCONT"),
    clients,
    connect: async () => {
      const client: RedisClientType = createClient({ url })
      client.on("error", () => undefined)
      await client.connect()
      clients.push(client)
      return client
    },
    disconnectAll: () => {
      for (const client of clients.splice(0)) client.destroy()
    }
  }
}

/**
 * Replica mode requires MCPSTORE_SECRET_KEY, the same on every replica (it encrypts the shared OAuth
 * tokens and seals MCP session ids): sets it in this test process, whose store processes inherit it.
 * Returns the restore, for `afterAll`.
 */
export const useReplicaSecret = (): (() => void) => {
  const before = process.env["MCPSTORE_SECRET_KEY"]
  process.env["MCPSTORE_SECRET_KEY"] = "replica-tests-shared-secret-0123456789"
  return () => {
    if (before === undefined) delete process.env["MCPSTORE_SECRET_KEY"]
    else process.env["MCPSTORE_SECRET_KEY"] = before
  }
}

/** How many replicas of `cluster` the registry holds with the URL they are reached at (they listen): those another replica can ask. */
export const replicasListening = async (client: RedisClientType, cluster: string): Promise<number> => {
  const keys = await client.keys(clusterKey(cluster, "replica", "*"))
  const entries = keys.length === 0 ? [] : await client.mGet(keys)
  return entries.filter((e) => e !== null && (JSON.parse(e) as { url: string }).url !== "").length
}

/**
 * A TCP proxy in front of a Redis server: `cut()` is a network partition between its clients and
 * Redis, `slow(ms)` a slow Redis (or network) for them alone.
 */
export interface RedisProxy {
  /** `redis://127.0.0.1:<proxy port>`. */
  readonly url: string
  /** Drops every connection through the proxy and refuses new ones, until `heal()`. */
  cut(): void
  heal(): void
  /** Holds what Redis sends back this long (ms) before passing it on, in order, from now on (0: at once). */
  slow(ms: number): void
  close(): Promise<void>
}

/** Starts a proxy on a free loopback port forwarding to `redis`. */
export const startRedisProxy = async (redis: RedisServer): Promise<RedisProxy> => {
  const sockets = new Set<Socket>()
  let cut = false
  let delayMs = 0
  const server = createServer((client) => {
    if (cut) return void client.destroy()
    const upstream = createConnection({ host: "127.0.0.1", port: redis.port })
    for (const s of [client, upstream]) {
      sockets.add(s)
      s.on("error", () => undefined)
      s.once("close", () => sockets.delete(s))
    }
    client.pipe(upstream)
    // Each chunk waits its delay after the one before it was passed on, so the order is kept.
    let passed = Promise.resolve()
    upstream.on("data", (chunk: Buffer) => {
      const due = Date.now() + delayMs
      passed = passed.then(async () => {
        if (Date.now() < due) await new Promise((resolve) => setTimeout(resolve, due - Date.now()))
        if (!client.destroyed) client.write(chunk)
      })
    })
    // The client gone: so is its connection to Redis. Redis gone: the client gets what Redis sent
    // before, at its delay, then the close (`cut()` drops both sides at once).
    client.once("close", () => upstream.destroy())
    upstream.once("close", () => void passed.then(() => client.end()))
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as { port: number }).port
  return {
    url: `redis://127.0.0.1:${port}`,
    cut: () => {
      cut = true
      for (const s of sockets) s.destroy()
    },
    heal: () => {
      cut = false
    },
    slow: (ms) => {
      delayMs = ms
    },
    close: async () => {
      for (const s of sockets) s.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  }
}
