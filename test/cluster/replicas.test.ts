/**
 * Three real store processes (`--redis-url`) on one real Redis, driven by a client that rotates over
 * them (docs/replicas.md):
 * - a service added through one replica is listed, waited on and called through every other (REST,
 *   and one MCP session whose requests land on each replica in turn), and deleted through a third; exactly one replica runs each service: the HTTP upstream sees one
 *   session (one health-check stream) and a `command` service has one process across the replicas;
 * - a restart asked of a replica that does not run the service reaches the one that does;
 * - the forwarding route refuses what is not signed by a replica, a browser, and a replay;
 * - Redis stopped: every replica keeps serving (the owners keep their services past the lease TTL,
 *   since no replica reaches Redis) and refuses changes with 503; back empty, nothing acknowledged
 *   is lost; a replica cut off from Redis alone (a proxy in front of each replica's Redis) stops its
 *   services when their leases expire and another takes over, never with two processes;
 * - SIGKILL of the replica running a service moves it to another within the lease TTL plus its
 *   connect time, with never two processes at once, and a call it held for its caller's input is
 *   refused as lost, at once, when retried on a survivor; an orderly stop hands its services over at once;
 * - the replicas register themselves and the leader writes the snapshot file.
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { randomUUID } from "node:crypto"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { FORWARD_PATH } from "../../src/cluster/forward.js"
import { clusterKey } from "../../src/redis/key-names.js"
import { sign, SIGNATURE_HEADER } from "../../src/cluster/signature.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import {
  eventually,
  fixtureService,
  freshDir,
  hasRedisServer,
  spawnStore,
  startRedisProxy,
  startRedisServer,
  useReplicaSecret,
  within,
  type RedisProxy,
  type RedisServer,
  type StoreProcess
} from "../support/index.js"

const CLUSTER = "three"
const LEASE_MS = 4000

/** Reads of a process's command line after which it is taken as settled (a process a store forks shows the store's until its exec). */
const SETTLED_READS = 4
/** What was read of each process in /proc: the marker of a fixture process, or none (and how often that was read). */
const readProcesses = new Map<string, { readonly marker: string | undefined; readonly reads: number }>()
const markerOf = (pid: string): string | undefined => {
  let argv: string[]
  try {
    argv = readFileSync(`/proc/${pid}/cmdline`, "latin1").split("\0")
  } catch {
    return undefined // ended meanwhile
  }
  const at = argv.indexOf("--name")
  return at === -1 ? undefined : argv[at + 1]
}

/**
 * How many processes of the stdio fixture run on this machine, by the marker each was started with
 * (`--name <marker>`), read from /proc without spawning a program (a `pgrep` per sample cost more
 * CPU than the rest of the file's sampling): the command line of a fixture process is read again at
 * every sample (one that has ended, a zombie included, has none), that of any other process only
 * until it has settled, so a sample costs the listing of /proc and a few reads.
 */
const fixtureProcesses = (): Map<string, number> => {
  const listed = new Set(readdirSync("/proc").filter((name) => /^\d+$/.test(name)))
  for (const pid of readProcesses.keys()) if (!listed.has(pid)) readProcesses.delete(pid)
  const counts = new Map<string, number>()
  for (const pid of listed) {
    const before = readProcesses.get(pid)
    let marker = before?.marker
    if (before === undefined || marker !== undefined || before.reads < SETTLED_READS) {
      marker = markerOf(pid)
      readProcesses.set(pid, { marker, reads: (before?.reads ?? 0) + 1 })
    }
    if (marker !== undefined) counts.set(marker, (counts.get(marker) ?? 0) + 1)
  }
  return counts
}
const processes = (marker: string): number => fixtureProcesses().get(marker) ?? 0

/**
 * Samples the fixture processes of some markers every 25 ms until stopped; `stop` resolves with the
 * most processes seen at once per marker (in the markers' order), the last sample included.
 */
const sampleProcesses = (markers: ReadonlyArray<string>): (() => Promise<number[]>) => {
  const most = markers.map(() => 0)
  const take = () => {
    const counts = fixtureProcesses()
    markers.forEach((m, i) => (most[i] = Math.max(most[i] as number, counts.get(m) ?? 0)))
  }
  let sampling = true
  const loop = (async () => {
    while (sampling) {
      take()
      await new Promise((resolve) => setTimeout(resolve, 25))
    }
  })()
  return async () => {
    sampling = false
    await loop
    take()
    return most
  }
}

describe.skipIf(!hasRedisServer)("three replicas on one Redis", { timeout: 60_000 }, () => {
  let redis: RedisServer
  let upstream: HttpFixture
  const replicas: StoreProcess[] = []
  const dirs: string[] = []
  /** Each replica reaches Redis through its own proxy, so that one can be cut off. */
  const proxies: RedisProxy[] = []

  const startReplica = (dir: string, proxy: RedisProxy) =>
    spawnStore({
      configFile: join(dir, "mcp.json"),
      monitoring: { health_check_seconds: 2 },
      extraArgs: ["--redis-url", proxy.url, "--cluster-name", CLUSTER, "--lease-ms", String(LEASE_MS), "--log-level", "info"],
      startTimeoutMs: 100_000
    })

  let restoreSecret: (() => void) | undefined
  beforeAll(async () => {
    restoreSecret = useReplicaSecret()
    ;[redis, upstream] = await Promise.all([startRedisServer(), startHttpFixture({ server: { elicitTool: true } })])
    const started = await Promise.all(
      [0, 1, 2].map(async (i) => {
        const dir = freshDir()
        dirs[i] = dir
        writeFileSync(join(dir, "mcp.json"), JSON.stringify({ mcpServers: {} }))
        proxies[i] = await startRedisProxy(redis)
        return startReplica(dir, proxies[i] as RedisProxy).then((r) => [i, r] as const)
      })
    )
    for (const [i, r] of started) replicas[i] = r
  }, 120_000)
  /** The test's client for the lease lookups (`ownerOf`): one connection, not one per lookup, for the polls that look many times a second. */
  let leaseReader: ReturnType<RedisServer["connect"]> | undefined
  afterEach(() => {
    leaseReader = undefined
    redis.disconnectAll()
  })
  afterAll(async () => {
    const logs = process.env["REPLICA_LOGS"]
    if (logs !== undefined) {
      replicas.forEach((r, i) => r !== undefined && writeFileSync(`${logs}-${i}.log`, r.output()))
      const client = await redis.connect()
      writeFileSync(`${logs}-slowlog.json`, JSON.stringify(await client.sendCommand(["SLOWLOG", "GET", "30"])))
    }
    restoreSecret?.()
    await Promise.all(replicas.map((r) => r?.kill()))
    await Promise.all([redis?.stop(), upstream?.stop(), ...proxies.map((p) => p.close())])
  })

  const names = async (r: StoreProcess): Promise<string[]> =>
    ((await r.get("/for_store/list_services")).body.services as Array<{ name: string }>).map((s) => s.name).sort()
  const status = async (r: StoreProcess, name: string): Promise<string | undefined> => (await r.get(`/for_store/service_status/${name}`)).body.status as string | undefined
  /** The replica that holds a service's lease now (by the pid its id carries), or undefined. */
  const ownerOf = async (name: string): Promise<StoreProcess | undefined> => {
    const client = await (leaseReader ??= redis.connect())
    const holder = await client.get(clusterKey(CLUSTER, "lease", `store/${name}`))
    return replicas.find((r) => r !== undefined && holder?.includes(`-${r.pid}-`) === true)
  }
  const live = () => replicas.filter((r) => r !== undefined)
  /** The marker each command service's fixture process carries (`--name <marker>`), by service name. */
  const markers = new Map<string, string>()
  const markFor = (name: string): string => {
    const marker = `${name}-${randomUUID().slice(0, 8)}`
    markers.set(name, marker)
    return marker
  }

  it("adds through one, waits, lists and calls through every other, deletes through a third; one session and one process per service", async () => {
    const [r0, r1, r2] = replicas as [StoreProcess, StoreProcess, StoreProcess]
    const marker = markFor("local")
    expect((await r0.post("/for_store/add_service?wait=15", { name: "remote", url: upstream.url })).body.connected).toEqual(["remote"])
    expect((await r1.post("/for_store/add_service?wait=15", fixtureService("local", "--name", marker))).body.connected).toEqual(["local"])
    // A wait on the third replica ends once the service is healthy where it runs.
    for (const name of ["remote", "local"]) {
      const waited = await r2.post("/for_store/wait_service", { client_id_or_service_name: name, status: "healthy", timeout: 15 })
      expect(waited.body.data?.result ?? waited.body.result).toBe(true)
    }
    for (const r of replicas) {
      expect(await names(r)).toEqual(["local", "remote"])
      for (const tool of ["remote__echo", "local__echo"]) {
        const called = await r.post("/for_store/call_tool", { tool_name: tool, args: { text: `via ${r.port}` } })
        expect(called.status, called.text).toBe(200)
        expect(called.body.result).toBe(`via ${r.port}`)
      }
      // Every replica shows the same tools and status, whichever runs the service.
      const tools = ((await r.get("/for_store/list_tools")).body.tools as Array<{ name: string }>).map((t) => t.name)
      expect(tools).toEqual(expect.arrayContaining(["remote__echo", "local__echo"]))
      expect(await status(r, "local")).toBe("healthy")
    }
    // One replica runs each: one session at the upstream (one health-check stream), one process of the command.
    expect(upstream.sessions()).toBe(1)
    expect(processes(marker)).toBe(1)
    expect(await ownerOf("remote")).toBeDefined()
    expect(await ownerOf("local")).toBeDefined()

    // An agent's service too: added through one, called through another, deleted through a third.
    expect((await r0.post("/for_agent/agent-1/add_service?wait=15", fixtureService("kit"))).body.connected).toEqual(["kit"])
    const agentCall = await r2.post("/for_agent/agent-1/call_tool", { tool_name: "kit__echo", args: { text: "agent call" } })
    expect(agentCall.status, agentCall.text).toBe(200)
    expect(agentCall.body.result).toBe("agent call")
    expect((await r1.del("/for_agent/agent-1/delete_service/kit")).status).toBe(200)

    // An MCP client whose every request lands on the next replica: one session, one initialize.
    let turn = 0
    let sessionStarts = 0
    const transport = new StreamableHTTPClientTransport(new URL("http://balancer.invalid/mcp"), {
      reconnectionOptions: { maxRetries: 0, initialReconnectionDelay: 100, maxReconnectionDelay: 100, reconnectionDelayGrowFactor: 1 },
      fetch: async (url, init) => {
        const asked = new URL(String(url))
        if (typeof init?.body === "string" && init.body.includes('"method":"initialize"')) sessionStarts += 1
        const r = replicas[turn++ % replicas.length] as StoreProcess
        return fetch(new URL(asked.pathname + asked.search, r.url), init)
      }
    })
    const mcp = new Client({ name: "rotating", version: "1.0.0" })
    mcp.onerror = () => undefined
    await within(mcp.connect(transport), 10_000, "connect /mcp")
    try {
      for (let i = 0; i < 6; i++) {
        expect((await within(mcp.listTools(), 10_000, "tools/list")).tools.map((t) => t.name)).toEqual(expect.arrayContaining(["remote__echo", "local__echo"]))
        const tool = i % 2 === 0 ? "remote__echo" : "local__echo"
        expect((await within(mcp.callTool({ name: tool, arguments: { text: `mcp ${i}` } }), 10_000, tool)).content).toEqual([{ type: "text", text: `mcp ${i}` }])
      }
      expect(sessionStarts).toBe(1)
    } finally {
      await mcp.close().catch(() => undefined)
    }

    // A restart asked of a replica that does not run the service reaches the one that does.
    const owner = (await ownerOf("remote")) as StoreProcess
    const other = live().find((r) => r !== owner) as StoreProcess
    const initializes = () => upstream.requests().filter((r) => r === "POST initialize").length
    const before = initializes()
    expect((await other.post("/for_store/restart_service", { service_name: "remote" })).status).toBe(200)
    expect(await eventually(() => initializes() === before + 1, 10_000, 20)).toBe(true)
    expect(await eventually(async () => (await status(other, "remote")) === "healthy", 10_000, 20)).toBe(true)
    expect(upstream.sessions()).toBe(1)

    expect((await r2.del("/for_store/delete_service/remote")).status).toBe(200)
    expect(await eventually(async () => (await names(r0)).join() === "local" && (await names(r1)).join() === "local", 5000, 20)).toBe(true)
    // The replica that ran it closed its session.
    expect(await eventually(() => upstream.sessions() === 0, 5000, 20)).toBe(true)
  })

  it("refuses internal requests that a replica did not sign, that a browser sends, or that replay one", async () => {
    const r = replicas[0] as StoreProcess
    const client = await redis.connect()
    const secret = (await client.get(clusterKey(CLUSTER, "secret"))) as string
    const body = JSON.stringify({ id: randomUUID(), field: "store/local", op: "ping", timeoutMs: 1000 })
    const post = (headers: Record<string, string>, text = body) =>
      fetch(`${r.url}${FORWARD_PATH}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: text })
    expect((await post({})).status).toBe(401)
    expect((await post({ [SIGNATURE_HEADER]: sign("not-the-secret-at-all", "POST", FORWARD_PATH, body) })).status).toBe(401)
    // A changed body under a valid signature.
    expect((await post({ [SIGNATURE_HEADER]: sign(secret, "POST", FORWARD_PATH, body) }, body.replace("ping", "call"))).status).toBe(401)
    expect((await post({ origin: "http://evil.example", [SIGNATURE_HEADER]: sign(secret, "POST", FORWARD_PATH, body) })).status).toBe(403)
    const signed = { [SIGNATURE_HEADER]: sign(secret, "POST", FORWARD_PATH, body) }
    const first = await post(signed)
    expect(first.status).toBe(200)
    expect(await first.text()).toMatch(/^\{"(r|e)":/)
    expect((await post(signed)).status).toBe(409)
  })

  const call = async (r: StoreProcess, tool: string, text: string) => {
    const called = await r.post("/for_store/call_tool", { tool_name: tool, args: { text }, timeout: 30 })
    expect(called.status, `${tool} through :${r.port}: ${called.text}`).toBe(200)
    expect(called.body.result).toBe(text)
  }

  it("keeps serving through a Redis outage, refuses changes meanwhile, and loses nothing acknowledged when Redis comes back empty", async () => {
    const marker = markFor("steady")
    const r0 = replicas[0] as StoreProcess
    expect((await r0.post("/for_store/add_service?wait=15", fixtureService("steady", "--name", marker))).body.connected).toEqual(["steady"])
    for (const r of live()) expect(await eventually(async () => (await status(r, "steady")) === "healthy", 10_000, 20)).toBe(true)
    const most = sampleProcesses([marker])
    await redis.stop({ kill: true })
    try {
      // Past the lease TTL: every replica reaches Redis no more, so the owner keeps running it.
      await new Promise((resolve) => setTimeout(resolve, LEASE_MS + 1000))
      for (const r of live()) {
        await call(r, "steady__echo", `outage ${r.port}`)
        expect(await names(r)).toEqual(expect.arrayContaining(["local", "steady"]))
        const refused = await r.post("/for_store/add_service", { name: "refused", url: upstream.url })
        expect(refused.status).toBe(503)
        expect(refused.body.error.details.reason).toBe("cluster_unavailable")
      }
    } finally {
      await redis.start()
    }
    // Back, empty: the definitions the replicas knew are written back, every service has an owner again.
    const client = await redis.connect()
    expect(await eventually(async () => (await client.hExists(clusterKey(CLUSTER, "defs"), "store/steady")) === 1, 15_000, 50)).toBe(true)
    expect(await eventually(async () => (await ownerOf("steady")) !== undefined && (await ownerOf("local")) !== undefined, 15_000, 50)).toBe(true)
    // A replica whose client is still between two reconnection attempts refuses the change (503, retry
    // after a second) until it reaches Redis again: a client retries, and so does this test.
    const added = async () => {
      const answer = await r0.post("/for_store/add_service", { name: "after-outage", url: upstream.url, disabled: true })
      if (answer.status !== 200) expect(answer.body.error.details.reason, answer.text).toBe("cluster_unavailable")
      return answer.status === 200
    }
    expect(await eventually(added, 10_000, 200)).toBe(true)
    for (const r of live()) {
      expect(await eventually(async () => (await names(r)).includes("after-outage"), 5000, 20)).toBe(true)
      await call(r, "steady__echo", `back ${r.port}`)
    }
    expect(await most()).toEqual([1])
  })

  it("a replica cut off from Redis stops its services when their leases expire and another takes over, never two processes", async () => {
    const marker = markFor("cutoff")
    const r1 = replicas[1] as StoreProcess
    expect((await r1.post("/for_store/add_service?wait=15", fixtureService("cutoff", "--name", marker))).body.connected).toEqual(["cutoff"])
    // Connected as a replica sees it (the owner's published view): its lease read from Redis.
    let holder: StoreProcess | undefined
    expect(await eventually(async () => (holder = await ownerOf("cutoff")) !== undefined, 10_000, 50)).toBe(true)
    const owner = holder as StoreProcess
    const proxy = proxies[replicas.indexOf(owner)] as RedisProxy
    const others = live().filter((r) => r !== owner)
    const most = sampleProcesses([marker])
    const cut = performance.now()
    proxy.cut()
    try {
      expect(await eventually(async () => others.includes((await ownerOf("cutoff")) as StoreProcess), LEASE_MS + 8000, 50)).toBe(true)
      for (const r of others) {
        const waited = await r.post("/for_store/wait_service", { client_id_or_service_name: "cutoff", status: "healthy", timeout: 15 })
        expect(waited.body.data?.result ?? waited.body.result).toBe(true)
        await call(r, "cutoff__echo", `moved ${r.port}`)
      }
      expect(performance.now() - cut).toBeLessThan(LEASE_MS + 8000)
    } finally {
      proxy.heal()
    }
    expect(await most()).toEqual([1])
    // Healed (once its client has reconnected), it is a replica like the others again: it calls the service where it runs.
    const healed = async () => (await owner.post("/for_store/call_tool", { tool_name: "cutoff__echo", args: { text: "healed" } })).body.result === "healed"
    expect(await eventually(healed, 15_000, 100)).toBe(true)
    expect(await status(owner, "cutoff")).toBe("healthy")
    // ...and takes changes again once it reaches Redis.
    const accepts = async () => (await owner.post("/for_store/add_service", { name: "probe", url: upstream.url, disabled: true })).status === 200
    expect(await eventually(accepts, 15_000, 100)).toBe(true)
    expect((await owner.del("/for_store/delete_service/probe")).status).toBe(200)
    expect(processes(marker)).toBe(1)
  })

  it("moves a service within the lease TTL when the replica running it is SIGKILLed, never running two processes; a call it held for input is refused as lost", async () => {
    const marker = markFor("moving")
    const r0 = replicas[0] as StoreProcess
    expect((await r0.post("/for_store/add_service?wait=15", fixtureService("moving", "--name", marker))).body.connected).toEqual(["moving"])
    const owner = (await ownerOf("moving")) as StoreProcess
    expect(owner).toBeDefined()
    const survivors = live().filter((r) => r !== owner)
    expect(await eventually(async () => (await status(survivors[0] as StoreProcess, "moving")) === "healthy", 10_000, 20)).toBe(true)
    // A call held for its caller's input by the replica about to be killed (to an HTTP service: a stdio
    // server's process that waits on a request keeps running, orphaned, until that request times out).
    expect((await r0.post("/for_store/add_service?wait=15", { name: "asker", url: upstream.url })).body.connected).toEqual(["asker"])
    expect(await eventually(async () => (await status(owner, "asker")) === "healthy", 10_000, 20)).toBe(true)
    const held = await owner.post("/for_store/call_tool", { tool_name: "asker__ask", accept_input_required: true })
    expect(held.body.result_type, held.text).toBe("input_required")
    const most = sampleProcesses([marker])
    let seen: number[] = []
    try {
      const killed = performance.now()
      await owner.kill()
      replicas[replicas.indexOf(owner)] = undefined as unknown as StoreProcess
      // A survivor runs it again, and every survivor shows it healthy.
      expect(await eventually(async () => (await ownerOf("moving")) !== undefined, LEASE_MS + 10_000, 50)).toBe(true)
      for (const r of survivors) {
        const waited = await r.post("/for_store/wait_service", { client_id_or_service_name: "moving", status: "healthy", timeout: 15 })
        expect(waited.body.data?.result ?? waited.body.result).toBe(true)
      }
      const moved = performance.now() - killed
      expect(moved).toBeLessThan(LEASE_MS + 8000)
      const called = await (survivors[1] as StoreProcess).post("/for_store/call_tool", { tool_name: "moving__echo", args: { text: "moved" } })
      expect(called.body.result).toBe("moved")
      // The held call's retry on a survivor: its holder is gone, so the caller is told the call is lost, at once.
      const retry = await within(
        (survivors[0] as StoreProcess).post("/for_store/call_tool", {
          tool_name: "asker__ask",
          request_state: held.body.request_state,
          input_responses: Object.fromEntries(Object.keys(held.body.input_requests as object).map((k) => [k, { action: "accept", content: { name: "Ada" } }]))
        }),
        5000,
        "the retry of a call held by a killed replica"
      )
      expect(retry.status, retry.text).toBe(400)
      expect(retry.body.error.code).toBe("VALIDATION_ERROR")
      expect(retry.text).toContain("held by another replica")
      expect((await (survivors[0] as StoreProcess).del("/for_store/delete_service/asker")).status).toBe(200)
    } finally {
      seen = await most()
    }
    expect(seen).toEqual([1])
    expect(processes(marker)).toBe(1)
  })

  it("hands its services over at once on an orderly stop, and the leader keeps a snapshot", async () => {
    const marker = markFor("handed")
    const first = live()[0] as StoreProcess
    expect((await first.post("/for_store/add_service?wait=15", fixtureService("handed", "--name", marker))).body.connected).toEqual(["handed"])
    // The snapshot is written by the leader, beside its own services file.
    const client = await redis.connect()
    // A replica SIGKILLed by the test before may hold the leader's lease until it expires: then another takes it.
    const leaderIndex = async () => {
      const leader = await client.get(clusterKey(CLUSTER, "lease", "leader"))
      return { leader, index: replicas.findIndex((r) => r !== undefined && leader?.includes(`-${r.pid}-`) === true) }
    }
    await eventually(async () => (await leaderIndex()).index !== -1, LEASE_MS + 5000, 50)
    const { leader, index } = await leaderIndex()
    expect(index, `the leader ${String(leader)} is one of the replicas`).not.toBe(-1)
    const snapshot = join(dirs[index] as string, "mcp.json.cluster-snapshot.json")
    expect(await eventually(() => existsSync(snapshot) && readFileSync(snapshot, "utf8").includes('"handed"'), 5000, 20)).toBe(true)

    const owner = (await ownerOf("handed")) as StoreProcess
    const survivor = live().find((r) => r !== owner) as StoreProcess
    const most = sampleProcesses([marker])
    let seen: number[] = []
    try {
      const stopped = performance.now()
      owner.child.kill("SIGTERM")
      await owner.exited
      replicas[replicas.indexOf(owner)] = undefined as unknown as StoreProcess
      const waited = await survivor.post("/for_store/wait_service", { client_id_or_service_name: "handed", status: "healthy", timeout: 15 })
      expect(waited.body.data?.result ?? waited.body.result).toBe(true)
      // Released at once: well before the lease would have expired.
      expect(await eventually(async () => (await ownerOf("handed")) !== undefined, 5000, 20)).toBe(true)
      expect(performance.now() - stopped).toBeLessThan(LEASE_MS + 4000)
    } finally {
      seen = await most()
    }
    expect(seen).toEqual([1])
    // Its registry entry is gone with it.
    expect(await eventually(async () => (await client.keys(clusterKey(CLUSTER, "replica", "*"))).length === live().length, 5000, 50)).toBe(true)
  })

  it("balances: a replica that joins is handed its share of the services, one at a time, with never two processes of one", async () => {
    const alone = live()
    expect(alone).toHaveLength(1)
    const most = sampleProcesses([...markers.values()])
    const dir = freshDir()
    writeFileSync(join(dir, "mcp.json"), JSON.stringify({ mcpServers: {} }))
    const proxy = await startRedisProxy(redis)
    proxies.push(proxy)
    const joined = await startReplica(dir, proxy)
    replicas.push(joined)
    // Six services (five command services and a disabled one) on two replicas: each runs three.
    const runs = async (r: StoreProcess) => {
      let n = 0
      for (const name of [...markers.keys(), "after-outage"]) if ((await ownerOf(name)) === r) n += 1
      return n
    }
    const balanced = await eventually(async () => (await runs(joined)) === 3 && (await runs(alone[0] as StoreProcess)) === 3, 45_000, 100)
    const holders = await Promise.all([...markers.keys(), "after-outage"].map(async (n) => `${n}: ${live().indexOf((await ownerOf(n)) as StoreProcess)}`))
    expect(balanced, `owners (index in the live replicas, 1 is the one that joined): ${holders.join(", ")}`).toBe(true)
    for (const name of markers.keys()) {
      const waited = await joined.post("/for_store/wait_service", { client_id_or_service_name: name, status: "healthy", timeout: 15 })
      expect(waited.body.data?.result ?? waited.body.result, name).toBe(true)
    }
    expect(await most()).toEqual([...markers.keys()].map(() => 1))
  }, 150_000)
})
