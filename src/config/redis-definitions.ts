/**
 * The live definitions of every scope in the cluster's Redis (docs/replicas.md, "Definitions"): the
 * `DefinitionsStore` of replica mode. Redis holds a hash `defs` (`store/<name>` or
 * `agent/<agent id>/<name>` → definition JSON), a revision `rev`, a capped stream `changes` (entry
 * id `<rev>-0`, the change as JSON) and an `epoch` set when the cluster is seeded. A change is one
 * Lua script (HSET/HDEL + INCR rev + XADD), refused when the revision moved since this replica last
 * read (it catches up and tries again), so every replica sees every change in the same order.
 *
 * Each replica reads the stream with XREAD BLOCK on its own connection from the revision it last
 * applied and hands the definitions to the store through `watch`, the path `--reload` uses for hand
 * edits of the services file (`Store.applyConfig`). A replica that missed entries the stream no
 * longer holds reloads the whole hash. When Redis comes back empty (no epoch), the first replica
 * to reach it writes the definitions it knew back (`seed`), so nothing acknowledged is lost.
 */
import { randomUUID } from "node:crypto"
import { writeBackup } from "./atomic-write.js"
import type { DefinitionsStore } from "./definitions-store.js"
import { configOf, DocumentDraft, readDocument, serialize, type EntryProblem, type JsonObject, type ServicesConfig, type ServicesDraft } from "./services-document.js"
import type { ServicesFileError } from "./services-file.js"
import { dict, nullPrototypeJson } from "../domain/dict.js"
import { canonicalJson } from "../domain/service-definition.js"
import { log } from "../logging/log.js"
import { ClusterUnavailable } from "../domain/errors.js"
import { RedisAway, timed, type ClusterConnection } from "../redis/connection.js"
import { clusterKey, parseServiceField, serviceField } from "../redis/key-names.js"

/** The stream keeps about this many changes; a replica further behind reloads the whole hash. */
export const CHANGES_MAXLEN = 10_000

/** How long one blocking read waits before it is issued again (ms). */
const BLOCK_MS = 5000

/**
 * How long a change may take (ms) before it is answered 503: its commit carries this deadline in
 * Redis's time, so a commit Redis runs later (it was frozen, the answer was slow) changes nothing.
 */
export const CHANGE_BUDGET_MS = 1500

/** One change as the stream carries it: the definitions set and the ones removed, by field. */
interface Change {
  readonly set: Readonly<Record<string, unknown>>
  readonly del: ReadonlyArray<string>
}

/**
 * The start of a script that runs only before a change's deadline (ARGV[1], ms in Redis's clock, the
 * one every replica shares): sets `past_deadline`, for the script to refuse with its own answer.
 */
export const PAST_DEADLINE = `
local now = redis.call('TIME')
local past_deadline = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) > tonumber(ARGV[1])
`

/**
 * KEYS: defs, rev, changes, epoch. ARGV: deadline (Redis's clock, ms), expected rev, expected epoch,
 * change JSON, count of sets, then field/value pairs, then the fields to delete. Returns {0, rev}
 * when written, {-1, rev} when the revision moved, {-2, 0} when the epoch is not the expected one
 * (Redis restarted or re-seeded), {-3, 0} when Redis runs it past its deadline (the change was
 * answered 503 already, or is about to be).
 */
const COMMIT = `${PAST_DEADLINE}
if past_deadline then return {-3, 0} end
if redis.call('GET', KEYS[4]) ~= ARGV[3] then return {-2, 0} end
local rev = tonumber(redis.call('GET', KEYS[2]) or '0')
if rev ~= tonumber(ARGV[2]) then return {-1, rev} end
local sets = tonumber(ARGV[5])
local i = 6
for _ = 1, sets do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  i = i + 2
end
while i <= #ARGV do
  redis.call('HDEL', KEYS[1], ARGV[i])
  i = i + 1
end
rev = redis.call('INCR', KEYS[2])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', '${CHANGES_MAXLEN}', rev .. '-0', 'change', ARGV[4])
return {0, rev}
`

/**
 * KEYS: defs, rev, changes, epoch. ARGV: the new epoch, then field/value pairs. Writes the
 * definitions only when the cluster has no epoch (empty: first start, or Redis restarted empty);
 * the revision goes on from `rev` if any is left. Returns 1 when it wrote, 0 when another replica did.
 */
const SEED = `
if redis.call('EXISTS', KEYS[4]) == 1 then return 0 end
redis.call('DEL', KEYS[1])
for i = 2, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
local rev = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[4], ARGV[1])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', '${CHANGES_MAXLEN}', rev .. '-0', 'reload', ARGV[1])
return 1
`

/** The hash fields of the definitions (`serviceField`) with their JSON. */
const fieldsOf = (config: ServicesConfig): Map<string, string> => {
  const out = new Map<string, string>()
  for (const [name, definition] of Object.entries(config.store)) out.set(serviceField({ kind: "store" }, name), JSON.stringify(definition))
  for (const [agentId, services] of Object.entries(config.agents)) {
    for (const [name, definition] of Object.entries(services)) out.set(serviceField({ kind: "agent", agentId }, name), JSON.stringify(definition))
  }
  return out
}

/** The services document of hash fields (`mcpServers`, `agents.<id>.mcpServers`); unreadable fields are skipped. */
const documentOf = (fields: ReadonlyMap<string, string>): JsonObject => {
  const store = dict<unknown>()
  const agents = dict<{ mcpServers: Record<string, unknown> }>()
  for (const [field, json] of fields) {
    let definition: unknown
    try {
      definition = JSON.parse(json)
    } catch {
      log.warn(`cluster definitions: ${field} is not JSON; left out`, { event: "cluster_definition_unreadable", field })
      continue
    }
    const service = parseServiceField(field)
    if (service?.scope.kind === "store") store[service.name] = definition
    else if (service?.scope.kind === "agent") (agents[service.scope.agentId] ??= { mcpServers: dict<unknown>() }).mcpServers[service.name] = definition
  }
  const doc = dict<unknown>()
  doc["mcpServers"] = store
  if (Object.keys(agents).length > 0) doc["agents"] = agents
  return doc
}

export class RedisDefinitions implements DefinitionsStore {
  #fields = new Map<string, string>()
  #doc: JsonObject = documentOf(this.#fields)
  #config: ServicesConfig | undefined
  /** The revision last applied here (the stream position). */
  #rev = 0
  /** The cluster's epoch as last read here (undefined: not seeded yet). */
  #epoch: string | undefined
  #queue: Promise<unknown> = Promise.resolve()
  readonly #subscribers = new Set<(next: ServicesConfig) => void>()
  /** Told of every change, this replica's own included (the snapshot file). */
  readonly #changeListeners = new Set<() => void>()
  #closed = false
  #reading: Promise<void> | undefined
  readonly #keys: { readonly defs: string; readonly rev: string; readonly changes: string; readonly epoch: string }

  private constructor(
    private readonly connection: ClusterConnection,
    cluster: string,
    readonly path: string
  ) {
    this.#keys = {
      defs: clusterKey(cluster, "defs"),
      rev: clusterKey(cluster, "rev"),
      changes: clusterKey(cluster, "changes"),
      epoch: clusterKey(cluster, "epoch")
    }
  }

  /**
   * Opens the cluster's definitions: an empty cluster is seeded with `initial` (the services file;
   * one replica does it), then the definitions are read and the stream is followed.
   */
  static async open(connection: ClusterConnection, cluster: string, path: string, initial: ServicesConfig): Promise<RedisDefinitions> {
    const definitions = new RedisDefinitions(connection, cluster, path)
    if (await definitions.#seed(fieldsOf(initial))) {
      log.info(`cluster ${cluster}: empty, seeded from the services file ${path} (${fieldsOf(initial).size} definitions)`, { event: "cluster_seeded", file: path })
    }
    await definitions.#reload()
    definitions.#reading = definitions.#follow()
    connection.onReturn(() => void definitions.#enqueue(() => definitions.#reconcile()).catch(() => undefined))
    return definitions
  }

  /** The revision last applied on this replica. */
  /** The services defined now, by `serviceField`. */
  fields(): ReadonlySet<string> {
    return new Set(this.#fields.keys())
  }

  get revision(): number {
    return this.#rev
  }

  read(): ServicesConfig {
    return (this.#config ??= configOf(this.#doc))
  }

  problems(): ReadonlyArray<EntryProblem> {
    return readDocument(this.#doc).problems
  }

  raw(): unknown {
    return nullPrototypeJson(this.#doc)
  }

  /**
   * Makes a change: answered within `CHANGE_BUDGET_MS` (and a bit), written or refused
   * (`ClusterUnavailable`, 503). A change refused is never applied later: one still waiting for
   * its turn when the time is up never starts, and a commit carries its deadline to Redis.
   */
  update<R>(mutate: (draft: ServicesDraft) => R): Promise<R> {
    const deadline = Date.now() + CHANGE_BUDGET_MS
    let started = false
    let abandoned = false
    const run = this.#enqueue(async () => {
      if (abandoned) throw ClusterUnavailable.of("the change", new Error("earlier changes or reads were still waiting for Redis"))
      started = true
      return this.#change(mutate, deadline)
    })
    let timer: NodeJS.Timeout | undefined
    const queued = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        if (started) return
        abandoned = true
        reject(ClusterUnavailable.of("the change", new Error(`it could not start within ${CHANGE_BUDGET_MS} ms`)))
      }, CHANGE_BUDGET_MS)
      timer.unref()
    })
    void run.catch(() => undefined)
    return Promise.race([run, queued]).finally(() => clearTimeout(timer))
  }

  async #change<R>(mutate: (draft: ServicesDraft) => R, deadline: number): Promise<R> {
    {
      // A commit refused because another replica wrote first is made again on the definitions as they now are.
      for (let attempt = 0; ; attempt++) {
        const draft = new DocumentDraft(nullPrototypeJson(this.#doc) as JsonObject, this.path)
        let result: R
        let next: Map<string, string>
        try {
          result = mutate(draft)
          next = fieldsOf(draft.view())
        } finally {
          draft.close()
        }
        const set: Record<string, unknown> = {}
        const del: string[] = []
        for (const [field, json] of next) if (this.#fields.get(field) !== json) set[field] = JSON.parse(json) as unknown
        for (const field of this.#fields.keys()) if (!next.has(field)) del.push(field)
        if (Object.keys(set).length === 0 && del.length === 0) return result
        const outcome = await this.#commit({ set, del }, deadline)
        if (outcome === "written") {
          for (const [field, value] of Object.entries(set)) this.#fields.set(field, JSON.stringify(value))
          for (const field of del) this.#fields.delete(field)
          this.#adopt()
          return result
        }
        if (outcome === "late") throw ClusterUnavailable.of("the change", new Error(`Redis did not run it within ${CHANGE_BUDGET_MS} ms`))
        if (attempt >= 5) throw new Error("cluster definitions: the change kept colliding with others; not written")
        if (outcome === "epoch") await this.#reconcile(deadline)
        else await this.#reload(deadline)
      }
    }
  }

  backup(): Promise<string> {
    return writeBackup(this.path, serialize(this.#doc), 0o600)
  }

  watch(onChange: (next: ServicesConfig) => void, _onError?: (error: ServicesFileError) => void): () => void {
    this.#subscribers.add(onChange)
    return () => void this.#subscribers.delete(onChange)
  }

  /**
   * Stops following the stream; resolves when the reader has stopped, which it does once the
   * connection is closed (by its owner, src/cluster/cluster.ts) or its blocking read ends.
   */
  close(): Promise<void> {
    this.#closed = true
    this.#subscribers.clear()
    this.#changeListeners.clear()
    return this.#reading ?? Promise.resolve()
  }

  #enqueue<A>(task: () => Promise<A>): Promise<A> {
    const run = this.#queue.then(task)
    this.#queue = run.catch(() => undefined)
    return run
  }

  #adopt(): void {
    this.#doc = documentOf(this.#fields)
    this.#config = undefined
    for (const listener of [...this.#changeListeners]) listener()
  }

  /** Calls `listener` after every change of the definitions, this replica's own included; returns the unsubscribe. */
  onChange(listener: () => void): () => void {
    this.#changeListeners.add(listener)
    return () => void this.#changeListeners.delete(listener)
  }

  #notify(): void {
    const config = this.read()
    for (const subscriber of [...this.#subscribers]) subscriber(config)
  }

  /**
   * Sends the commit with `deadline` (this replica's clock) as a deadline in Redis's clock. A commit
   * that may have been sent but was not answered is answered 503 only once `deadline` has passed
   * here: Redis refuses to run it from then on, so it never lands after its refusal.
   */
  async #commit(change: Change, deadline: number): Promise<"written" | "moved" | "epoch" | "late"> {
    const k = this.#keys
    const pairs = Object.entries(change.set).flatMap(([field, value]) => [field, JSON.stringify(value)])
    let reply: [number, number]
    try {
      reply = (await timed(
        this.connection.client.eval(COMMIT, {
          keys: [k.defs, k.rev, k.changes, k.epoch],
          arguments: [String(this.connection.redisDeadline(deadline)), String(this.#rev), this.#epoch ?? "", JSON.stringify(change), String(pairs.length / 2), ...pairs, ...change.del]
        }),
        deadline - Date.now(),
        "the change"
      )) as [number, number]
    } catch (e) {
      // Not sent (Redis known away, or no connection): refused at once. Otherwise it may run later.
      const unsent = e instanceof RedisAway || (e instanceof Error && e.message === "The client is offline")
      const wait = deadline - Date.now()
      if (!unsent && wait > 0) await new Promise((resolve) => setTimeout(resolve, wait))
      throw ClusterUnavailable.of("the change", e)
    }
    if (reply[0] === 0) {
      this.#rev = reply[1]
      return "written"
    }
    return reply[0] === -1 ? "moved" : reply[0] === -3 ? "late" : "epoch"
  }

  /** Writes `fields` when the cluster has no epoch; true when this replica wrote them. */
  async #seed(fields: ReadonlyMap<string, string>, deadline?: number): Promise<boolean> {
    const k = this.#keys
    const written = await this.connection.run(
      "seeding the cluster",
      () => this.connection.client.eval(SEED, { keys: [k.defs, k.rev, k.changes, k.epoch], arguments: [randomUUID(), ...[...fields].flat()] }),
      deadline
    )
    return written === 1
  }

  /** Reads the whole hash, the revision and the epoch at once; tells the store when they changed. */
  async #reload(deadline?: number): Promise<void> {
    const k = this.#keys
    const [fields, rev, epoch] = (await this.connection.run(
      "reading the definitions",
      () => this.connection.client.multi().hGetAll(k.defs).get(k.rev).get(k.epoch).exec(),
      deadline
    )) as unknown as [Record<string, string>, string | null, string | null]
    const before = canonicalJson(Object.fromEntries(this.#fields))
    this.#fields = new Map(Object.entries(fields))
    this.#rev = Number(rev ?? 0)
    this.#epoch = epoch ?? undefined
    this.#adopt()
    if (canonicalJson(Object.fromEntries(this.#fields)) !== before) this.#notify()
  }

  /**
   * After Redis was away: when it came back empty (no epoch) the definitions this replica knew are
   * written back (the first replica to get there does it), then everything is read again.
   */
  async #reconcile(deadline?: number): Promise<void> {
    const epoch = (await this.connection.run("reading the epoch", () => this.connection.client.get(this.#keys.epoch), deadline)) ?? undefined
    if (epoch === undefined && (await this.#seed(this.#fields, deadline))) {
      log.warn(`cluster Redis came back empty: this replica wrote back the ${this.#fields.size} definitions it knew (revision ${this.#rev})`, {
        event: "cluster_reseeded",
        revision: this.#rev,
        definitions: this.#fields.size
      })
    }
    await this.#reload(deadline)
  }

  /** Applies the stream's entries after `#rev`, in order; a gap (trimmed entries, a re-seed) reloads everything. */
  async #apply(entries: ReadonlyArray<{ readonly id: string; readonly message: Record<string, string> }>): Promise<void> {
    let changed = false
    for (const { id, message } of entries) {
      const rev = Number(id.split("-")[0])
      if (rev <= this.#rev) continue
      const change = message["change"] === undefined ? undefined : parseChange(message["change"])
      if (rev !== this.#rev + 1 || change === undefined) {
        await this.#reload()
        return
      }
      for (const [field, value] of Object.entries(change.set)) this.#fields.set(field, JSON.stringify(value))
      for (const field of change.del) this.#fields.delete(field)
      this.#rev = rev
      changed = true
    }
    if (!changed) return
    this.#adopt()
    this.#notify()
  }

  /** The stream reader: XREAD BLOCK from the revision applied; after a connection loss, reconciles first. */
  async #follow(): Promise<void> {
    const reader = this.connection.reader
    while (!this.#closed) {
      try {
        const reply = await reader.xRead({ key: this.#keys.changes, id: `${this.#rev}-0` }, { BLOCK: BLOCK_MS, COUNT: 1000 })
        const streams = reply as Array<{ messages: Array<{ id: string; message: Record<string, string> }> }> | null
        const entries = streams?.[0]?.messages ?? []
        if (entries.length > 0) await this.#enqueue(() => this.#apply(entries))
      } catch {
        // Redis went away: no read from the old position before a reconcile succeeded, since Redis may
        // have come back empty and counted its revisions again from 1.
        while (!this.#closed) {
          await waitUntilReady(reader, () => this.#closed)
          await waitUntilReady(this.connection.client, () => this.#closed)
          if (this.#closed) return
          const done = await this.#enqueue(() => this.#reconcile()).then(
            () => true,
            (e: unknown) => {
              log.debug(`cluster definitions: reconciling failed (${String(e)}); trying again`)
              return false
            }
          )
          if (done) break
          await new Promise((resolve) => setTimeout(resolve, 200).unref())
        }
      }
    }
  }
}

const parseChange = (text: string): Change | undefined => {
  try {
    const value = JSON.parse(text) as Partial<Change>
    if (typeof value.set !== "object" || value.set === null || !Array.isArray(value.del)) return undefined
    return { set: value.set, del: value.del.filter((f): f is string => typeof f === "string") }
  } catch {
    return undefined
  }
}

/** Resolves when `client` is connected again (or `stopped()`), checking on its `ready` event and every second. */
const waitUntilReady = (client: ClusterConnection["client"], stopped: () => boolean): Promise<void> =>
  new Promise((resolve) => {
    if (client.isReady || stopped()) return resolve()
    const done = () => {
      clearInterval(timer)
      client.off("ready", done)
      resolve()
    }
    const timer = setInterval(() => {
      if (client.isReady || stopped()) done()
    }, 1000)
    timer.unref()
    client.on("ready", done)
  })
