/**
 * The services configuration file (shared/LIFECYCLE.md, Persistence): the single source of truth for
 * service definitions, in the `mcpServers` format MCP clients use, plus an `agents` section. Changes
 * are serialized and written atomically before they are acknowledged; hand edits are picked up by
 * `watch()` for `--reload`. The file is someone's document: unknown fields and the keys services
 * were read from are kept. Its objects, and the records of definitions read from it, have a null
 * prototype (src/domain/dict.ts): a service "constructor" or an agent "__proto__" is a key like
 * any other.
 */
import { randomBytes } from "node:crypto"
import { constants as fsConstants, watch as watchFolder, type FSWatcher } from "node:fs"
import { mkdir, open as openFile, readdir, readFile, rename, rm, stat, type FileHandle } from "node:fs/promises"
import { basename, dirname, join, resolve as resolvePath } from "node:path"
import { dict, nullPrototypeJson, parseJsonDict } from "../domain/dict.js"
import {
  agentIdProblem,
  canonicalJson,
  serviceNameProblem,
  type Scope,
  type ServiceDefinition
} from "../domain/service.js"

/** Every service definition of the file, by scope. Frozen: a snapshot, not a handle. */
export interface ServicesConfig {
  readonly store: Readonly<Record<string, ServiceDefinition>>
  readonly agents: Readonly<Record<string, Readonly<Record<string, ServiceDefinition>>>>
}

/**
 * The file cannot be read, parsed, created, written or watched. The message starts with the path;
 * `detail` is the rest (for a parse error, the parser's message with line and column).
 */
export class ServicesFileError extends Error {
  readonly _tag = "ServicesFileError"
  override readonly name = "ServicesFileError"
  constructor(
    readonly path: string,
    readonly detail: string,
    options?: ErrorOptions
  ) {
    super(`${path}: ${detail}`, options)
  }
}

/**
 * A working copy of the document handed to `ServicesFile.update`: every change made through it is
 * written in one go when the mutate function returns. Invalid names or agent ids throw a
 * `RangeError`, which rejects the update with nothing written.
 */
export interface ServicesDraft {
  /** The definition of `name` in `scope`, or undefined. */
  getService(scope: Scope, name: string): ServiceDefinition | undefined
  /**
   * Adds or replaces a definition. An agent service that was read from a `<name>_byagent_<agent>`
   * key is written back to that key; a new one goes to `agents.<agent>.mcpServers.<name>`.
   */
  setService(scope: Scope, name: string, definition: ServiceDefinition): void
  /** Removes a definition (from every place it was read from); false when there was none. */
  removeService(scope: Scope, name: string): boolean
  /** Removes an agent and all its services; false when it had none. */
  removeAgent(agentId: string): boolean
  /** Removes every store-scope service; returns how many there were. */
  clearStore(): number
  /** Removes every service of every scope; other top-level fields of the document are kept. */
  clearAll(): void
  /** Replaces the whole document (checked like a file on open; throws `ServicesFileError` when malformed). */
  replaceDocument(document: unknown): void
  /** The definitions as they stand in this draft. */
  view(): ServicesConfig
}

const BY_AGENT = "_byagent_"
const DEBOUNCE_MS = 100

type JsonObject = Record<string, unknown>

const isObject = (v: unknown): v is JsonObject => typeof v === "object" && v !== null && !Array.isArray(v)

/** Own property or undefined: file keys such as `__proto__` must not reach the prototype. */
const own = (obj: unknown, key: string): unknown => (isObject(obj) && Object.hasOwn(obj, key) ? obj[key] : undefined)

const setOwn = (obj: JsonObject, key: string, value: unknown): void => {
  Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true })
}

/** `weather_byagent_agent-1` -> { name: "weather", agentId: "agent-1" }; undefined for a store key. */
const splitByAgentKey = (key: string): { readonly name: string; readonly agentId: string } | undefined => {
  const at = key.indexOf(BY_AGENT)
  if (at <= 0 || at + BY_AGENT.length >= key.length) return undefined
  return { name: key.slice(0, at), agentId: key.slice(at + BY_AGENT.length) }
}

const serialize = (doc: JsonObject): string => `${JSON.stringify(doc, null, 2)}\n`

const deepFreeze = <T>(value: T): T => {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value)
    for (const v of Object.values(value)) deepFreeze(v)
  }
  return value
}

/** Why a parsed document cannot be used, or undefined when its shape is right. */
const shapeProblem = (doc: unknown): string | undefined => {
  if (!isObject(doc)) return "the top level must be a JSON object"
  const servers = own(doc, "mcpServers")
  const serversProblem = (value: unknown, at: string): string | undefined => {
    if (value === undefined) return undefined
    if (!isObject(value)) return `"${at}" must be an object of service definitions`
    for (const [name, def] of Object.entries(value)) {
      if (!isObject(def)) return `"${at}.${name}" must be an object (a service definition)`
    }
    return undefined
  }
  const top = serversProblem(servers, "mcpServers")
  if (top !== undefined) return top
  const agents = own(doc, "agents")
  if (agents === undefined) return undefined
  if (!isObject(agents)) return `"agents" must be an object of agents`
  for (const [agentId, agent] of Object.entries(agents)) {
    if (!isObject(agent)) return `"agents.${agentId}" must be an object with "mcpServers"`
    const problem = serversProblem(own(agent, "mcpServers"), `agents.${agentId}.mcpServers`)
    if (problem !== undefined) return problem
  }
  return undefined
}

const withLineAndColumn = (message: string, text: string): string => {
  const position = /at position (\d+)/.exec(message)
  if (position === null || /line \d+/.test(message)) return message
  const before = text.slice(0, Number(position[1]))
  const line = before.split("\n").length
  const column = before.length - before.lastIndexOf("\n")
  return `${message} (line ${line}, column ${column})`
}

/** Parses and checks the file's content; throws `ServicesFileError` naming the path and the problem. */
const parseDocument = (path: string, text: string): JsonObject => {
  const body = text.replace(/^\uFEFF/, "")
  let doc: unknown
  try {
    doc = parseJsonDict(body)
  } catch (e) {
    throw new ServicesFileError(path, `not valid JSON: ${withLineAndColumn((e as Error).message, body)}`, { cause: e })
  }
  const problem = shapeProblem(doc)
  if (problem !== undefined) throw new ServicesFileError(path, `not a services file: ${problem}`)
  return doc as JsonObject
}

/** The definitions of a document; the `agents` section wins over a `_byagent_` key for the same service. */
const configOf = (doc: JsonObject): ServicesConfig => {
  const store = new Map<string, ServiceDefinition>()
  const agents = new Map<string, Map<string, ServiceDefinition>>()
  const agentMap = (agentId: string): Map<string, ServiceDefinition> => {
    let m = agents.get(agentId)
    if (m === undefined) {
      m = new Map()
      agents.set(agentId, m)
    }
    return m
  }
  const servers = own(doc, "mcpServers")
  if (isObject(servers)) {
    for (const [key, def] of Object.entries(servers)) {
      const byAgent = splitByAgentKey(key)
      if (byAgent === undefined) store.set(key, def as ServiceDefinition)
      else agentMap(byAgent.agentId).set(byAgent.name, def as ServiceDefinition)
    }
  }
  const agentsSection = own(doc, "agents")
  if (isObject(agentsSection)) {
    for (const [agentId, agent] of Object.entries(agentsSection)) {
      const m = agentMap(agentId)
      const agentServers = own(agent, "mcpServers")
      if (isObject(agentServers)) {
        for (const [name, def] of Object.entries(agentServers)) m.set(name, def as ServiceDefinition)
      }
    }
  }
  const copy = (m: Map<string, ServiceDefinition>) => dict([...m].map(([name, def]) => [name, nullPrototypeJson(def) as ServiceDefinition]))
  return deepFreeze({ store: copy(store), agents: dict([...agents].map(([id, m]) => [id, copy(m)])) })
}

const checkScopeAndName = (scope: Scope, name: string): void => {
  const nameProblem = serviceNameProblem(name)
  if (nameProblem !== undefined) throw new RangeError(`service name "${name}" ${nameProblem}`)
  if (scope.kind === "agent") {
    const idProblem = agentIdProblem(scope.agentId)
    if (idProblem !== undefined) throw new RangeError(`agent id "${scope.agentId}" ${idProblem}`)
  }
}

/** The draft given to `update`; works on its own deep copy of the document. */
class DocumentDraft implements ServicesDraft {
  #open = true

  constructor(
    public doc: JsonObject,
    private readonly path: string
  ) {}

  close(): void {
    this.#open = false
  }

  #guard(): void {
    if (!this.#open) throw new Error("a services draft is only usable inside its update()")
  }

  #child(parent: JsonObject, key: string): JsonObject {
    const existing = own(parent, key)
    if (isObject(existing)) return existing
    const created: JsonObject = dict()
    setOwn(parent, key, created)
    return created
  }

  #agentServers(agentId: string): JsonObject | undefined {
    const servers = own(own(this.doc, "agents"), agentId)
    const section = own(servers, "mcpServers")
    return isObject(section) ? section : undefined
  }

  #storeServers(): JsonObject | undefined {
    const servers = own(this.doc, "mcpServers")
    return isObject(servers) ? servers : undefined
  }

  /** Drops an agent left without services (and `agents` left without agents), unless they hold other fields. */
  #prune(agentId: string): void {
    const agents = own(this.doc, "agents")
    if (!isObject(agents)) return
    const agent = own(agents, agentId)
    if (isObject(agent)) {
      const servers = own(agent, "mcpServers")
      const onlyServers = Object.keys(agent).every((k) => k === "mcpServers")
      if (onlyServers && (servers === undefined || (isObject(servers) && Object.keys(servers).length === 0))) {
        delete agents[agentId]
      }
    }
    if (Object.keys(agents).length === 0) delete this.doc["agents"]
  }

  getService(scope: Scope, name: string): ServiceDefinition | undefined {
    this.#guard()
    const def =
      scope.kind === "store"
        ? splitByAgentKey(name) === undefined
          ? own(this.#storeServers(), name)
          : undefined
        : (own(this.#agentServers(scope.agentId), name) ?? own(this.#storeServers(), `${name}${BY_AGENT}${scope.agentId}`))
    return isObject(def) ? (nullPrototypeJson(def) as ServiceDefinition) : undefined
  }

  setService(scope: Scope, name: string, definition: ServiceDefinition): void {
    this.#guard()
    checkScopeAndName(scope, name)
    if (!isObject(definition)) throw new RangeError(`the definition of "${name}" must be an object`)
    const def = nullPrototypeJson(definition) as JsonObject
    if (scope.kind === "store") {
      setOwn(this.#child(this.doc, "mcpServers"), name, def)
      return
    }
    const agentServers = this.#agentServers(scope.agentId)
    if (agentServers !== undefined && Object.hasOwn(agentServers, name)) {
      setOwn(agentServers, name, def)
      return
    }
    const storeServers = this.#storeServers()
    const byAgentKey = `${name}${BY_AGENT}${scope.agentId}`
    if (storeServers !== undefined && Object.hasOwn(storeServers, byAgentKey)) {
      setOwn(storeServers, byAgentKey, def)
      return
    }
    const agent = this.#child(this.#child(this.doc, "agents"), scope.agentId)
    setOwn(this.#child(agent, "mcpServers"), name, def)
  }

  removeService(scope: Scope, name: string): boolean {
    this.#guard()
    const storeServers = this.#storeServers()
    if (scope.kind === "store") {
      if (storeServers === undefined || splitByAgentKey(name) !== undefined || !Object.hasOwn(storeServers, name)) {
        return false
      }
      delete storeServers[name]
      return true
    }
    let removed = false
    const agentServers = this.#agentServers(scope.agentId)
    if (agentServers !== undefined && Object.hasOwn(agentServers, name)) {
      delete agentServers[name]
      removed = true
      this.#prune(scope.agentId)
    }
    const byAgentKey = `${name}${BY_AGENT}${scope.agentId}`
    if (storeServers !== undefined && Object.hasOwn(storeServers, byAgentKey)) {
      delete storeServers[byAgentKey]
      removed = true
    }
    return removed
  }

  removeAgent(agentId: string): boolean {
    this.#guard()
    let removed = false
    const agents = own(this.doc, "agents")
    if (isObject(agents) && Object.hasOwn(agents, agentId)) {
      const servers = own(own(agents, agentId), "mcpServers")
      removed = isObject(servers) && Object.keys(servers).length > 0
      delete agents[agentId]
      if (Object.keys(agents).length === 0) delete this.doc["agents"]
    }
    const storeServers = this.#storeServers()
    if (storeServers !== undefined) {
      for (const key of Object.keys(storeServers)) {
        if (splitByAgentKey(key)?.agentId === agentId) {
          delete storeServers[key]
          removed = true
        }
      }
    }
    return removed
  }

  clearStore(): number {
    this.#guard()
    const storeServers = this.#storeServers()
    if (storeServers === undefined) return 0
    let count = 0
    for (const key of Object.keys(storeServers)) {
      if (splitByAgentKey(key) === undefined) {
        delete storeServers[key]
        count++
      }
    }
    return count
  }

  clearAll(): void {
    this.#guard()
    setOwn(this.doc, "mcpServers", dict())
    delete this.doc["agents"]
  }

  replaceDocument(document: unknown): void {
    this.#guard()
    const problem = shapeProblem(document)
    if (problem !== undefined) throw new ServicesFileError(this.path, `not a services file: ${problem}`)
    this.doc = nullPrototypeJson(document) as JsonObject
  }

  view(): ServicesConfig {
    this.#guard()
    return configOf(this.doc)
  }
}

const errnoCode = (e: unknown): string | undefined =>
  typeof e === "object" && e !== null && "code" in e && typeof e.code === "string" ? e.code : undefined

/** The mode of a file this store writes: 0600, or the old file's mode where it is stricter (never looser). */
const privateMode = (previous: number | undefined): number => (previous === undefined ? 0o600 : previous & 0o600)

/**
 * Replaces `path` with `text` so that a crash at any moment leaves the old or the new file: a
 * temporary file in the same folder, flushed, renamed over the old one, then the folder flushed.
 * The file holds secrets (env and header values): it is written with mode 0600, or the old file's
 * mode where that is stricter; its owner is kept when allowed. The temporary file is created new
 * (O_CREAT|O_EXCL: never an existing file, never through a symlink), 0600 from the start.
 *
 * Every step is a round trip to libuv's thread pool, and on a busy event loop each one waits for
 * a turn of the loop: the steps that do not depend on each other (reading the old file's mode,
 * creating the temporary file, opening the folder; setting mode and owner) run together.
 */
const writeAtomically = async (path: string, text: string): Promise<void> => {
  const dir = dirname(path)
  const tmp = join(dir, `.${basename(path)}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`)
  const [previousResult, handleResult, folderResult] = await Promise.allSettled([
    stat(path),
    openFile(tmp, "wx", 0o600),
    openFile(dir, "r")
  ])
  const previous = previousResult.status === "fulfilled" ? previousResult.value : undefined
  const folder = folderResult.status === "fulfilled" ? folderResult.value : undefined
  const created = handleResult.status === "fulfilled"
  try {
    try {
      if (handleResult.status === "rejected") throw handleResult.reason
      const handle = handleResult.value
      try {
        const mode = privateMode(previous === undefined ? undefined : previous.mode & 0o7777)
        const owned = previous === undefined || (previous.uid === process.getuid?.() && previous.gid === process.getgid?.())
        await Promise.all([
          // The umask may have narrowed 0600 further when the file was created: that is kept.
          mode === 0o600 ? undefined : handle.chmod(mode),
          owned ? undefined : handle.chown(previous.uid, previous.gid).catch(() => undefined)
        ])
        await handle.writeFile(text, "utf8")
        await handle.sync()
      } finally {
        await handle.close()
      }
      await rename(tmp, path)
    } catch (e) {
      if (created) await rm(tmp, { force: true }).catch(() => undefined)
      throw e
    }
    // Best effort: some platforms and file systems cannot fsync a folder. The rename is done and
    // visible; only its durability across a power loss is then not confirmed.
    await folder?.sync().catch(() => undefined)
  } finally {
    // Closed on every path, a failed write included.
    await folder?.close().catch(() => undefined)
  }
}

/** `20261123T034844Z`: a time for file names (no colons). */
const fileTime = (at: Date): string => at.toISOString().replace(/[-:]/g, "").replace(/\.\d+Z$/, "Z")

/**
 * Writes `text` to a new file beside `path`: `<path>.bak`, or when that name is taken (by a file,
 * a folder or a symlink) `<path>.<time>.bak`, then `<path>.<time>.<n>.bak`. Each name is created
 * with O_CREAT|O_EXCL|O_NOFOLLOW, so an existing file is never overwritten and a planted symlink
 * never followed. Mode 0600 (or `mode` where stricter). Resolves with the name written.
 */
const writeBackup = async (path: string, text: string, mode: number | undefined): Promise<string> => {
  const time = fileTime(new Date())
  const flags = fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_NOFOLLOW
  for (let n = 0; ; n++) {
    const name = n === 0 ? `${path}.bak` : n === 1 ? `${path}.${time}.bak` : `${path}.${time}.${n - 1}.bak`
    let handle: FileHandle
    try {
      handle = await openFile(name, flags, 0o600)
    } catch (e) {
      const code = errnoCode(e)
      if ((code === "EEXIST" || code === "ELOOP" || code === "EISDIR") && n < 1000) continue
      throw e
    }
    try {
      const wanted = privateMode(mode)
      if (wanted !== 0o600) await handle.chmod(wanted)
      await handle.writeFile(text, "utf8")
      await handle.sync()
    } catch (e) {
      await handle.close().catch(() => undefined)
      await rm(name, { force: true }).catch(() => undefined)
      throw e
    }
    await handle.close()
    return name
  }
}

/**
 * Removes the temporary files a process killed in the middle of `writeAtomically` left beside the
 * services file (`.<name>.<pid>.<hex>.tmp`), when that process no longer runs. Best effort. They
 * hold a full copy of the file, secrets included, and would pile up crash after crash.
 */
const removeStaleTemporaries = async (path: string): Promise<void> => {
  const pattern = new RegExp(`^\\.${basename(path).replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\.(\\d+)\\.[0-9a-f]+\\.tmp$`)
  let names: string[]
  try {
    names = await readdir(dirname(path))
  } catch {
    return
  }
  for (const name of names) {
    const pid = pattern.exec(name)?.[1]
    if (pid === undefined || Number(pid) === process.pid || processRuns(Number(pid))) continue
    await rm(join(dirname(path), name), { force: true }).catch(() => undefined)
  }
}

const processRuns = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return errnoCode(e) === "EPERM"
  }
}

interface Subscriber {
  readonly onChange: (next: ServicesConfig) => void
  readonly onError: ((error: ServicesFileError) => void) | undefined
}

/**
 * The services configuration file, open for reading and changing. One instance per file per
 * process; it assumes no other process writes the file except a person editing it (see `watch`).
 */
export class ServicesFile {
  readonly #path: string
  #doc: JsonObject
  /** The file's content as this process last wrote or adopted it. */
  #text: string
  /** `#doc` as `update` would write it (undefined: not computed since `#doc` last changed). */
  #serialized: string | undefined
  /** The definitions of `#doc` (undefined: not computed since `#doc` last changed). */
  #config: ServicesConfig | undefined
  #queue: Promise<unknown> = Promise.resolve()
  readonly #subscribers = new Set<Subscriber>()
  #watcher: FSWatcher | undefined
  #timer: NodeJS.Timeout | undefined

  private constructor(path: string, doc: JsonObject, text: string) {
    this.#path = path
    this.#doc = doc
    this.#text = text
  }

  /** Makes `doc` the document as stored; what is derived from it is computed when next asked for. */
  #adopt(doc: JsonObject, text: string, serialized?: string): void {
    this.#doc = doc
    this.#text = text
    this.#serialized = serialized
    this.#config = undefined
  }

  /**
   * Opens the file at `path` (made absolute). A missing file is created as `{"mcpServers": {}}`
   * (mode 0600), with its folder (0700). Rejects with `ServicesFileError` (path and cause) when the
   * file cannot be read, is not valid JSON or has a malformed `mcpServers`/`agents`; such a file is
   * left untouched.
   */
  static async open(path: string): Promise<ServicesFile> {
    const absolute = resolvePath(path)
    let text: string
    try {
      text = await readFile(absolute, "utf8")
    } catch (e) {
      if (errnoCode(e) !== "ENOENT") {
        throw new ServicesFileError(absolute, `cannot be read (${(e as Error).message})`, { cause: e })
      }
      text = serialize({ mcpServers: {} })
      try {
        // A folder made here is private: it is the data space (services file, tool records).
        await mkdir(dirname(absolute), { recursive: true, mode: 0o700 })
        await writeAtomically(absolute, text)
      } catch (e2) {
        throw new ServicesFileError(absolute, `cannot be created (${(e2 as Error).message})`, { cause: e2 })
      }
    }
    const file = new ServicesFile(absolute, parseDocument(absolute, text), text)
    await removeStaleTemporaries(absolute)
    return file
  }

  /** The file's absolute path. */
  get path(): string {
    return this.#path
  }

  /** The definitions as last written or read (a frozen snapshot). */
  read(): ServicesConfig {
    return (this.#config ??= configOf(this.#doc))
  }

  /** A copy of the whole document as stored, unknown fields included. */
  raw(): unknown {
    return nullPrototypeJson(this.#doc)
  }

  /**
   * Applies `mutate` to a draft of the document and writes the result before resolving with what
   * `mutate` returned. Updates run one at a time in call order, each on the result of the one
   * before. When `mutate` throws, or the write fails (`ServicesFileError`), the update rejects and
   * both the file and `read()` stay as they were. A draft with no change writes nothing.
   */
  update<R>(mutate: (draft: ServicesDraft) => R): Promise<R> {
    const run = this.#queue.then(async () => {
      const draft = new DocumentDraft(nullPrototypeJson(this.#doc) as JsonObject, this.#path)
      let result: R
      try {
        result = mutate(draft)
      } finally {
        draft.close()
      }
      if (result instanceof Promise) {
        result.catch(() => undefined)
        throw new TypeError("ServicesFile.update: mutate must be synchronous")
      }
      const text = serialize(draft.doc)
      if (text === (this.#serialized ??= serialize(this.#doc))) return result
      try {
        await writeAtomically(this.#path, text)
      } catch (e) {
        throw new ServicesFileError(this.#path, `cannot be written (${(e as Error).message})`, { cause: e })
      }
      this.#adopt(draft.doc, text, text)
      return result
    })
    this.#queue = run.catch(() => undefined)
    return run
  }

  /**
   * Copies the file as it is on disk (or as last written, when it is missing) to a new backup file
   * beside it (see `writeBackup`: `<file>.bak` or a unique name; never overwriting, never through a
   * symlink; mode 0600). Runs in turn with `update`. Resolves with the backup's path.
   */
  backup(): Promise<string> {
    const run = this.#queue.then(async () => {
      let text = this.#text
      let mode: number | undefined
      try {
        ;[text, mode] = await Promise.all([readFile(this.#path, "utf8"), stat(this.#path).then((st) => st.mode & 0o7777)])
      } catch (e) {
        if (errnoCode(e) !== "ENOENT") throw new ServicesFileError(this.#path, `cannot be read (${(e as Error).message})`, { cause: e })
      }
      try {
        return await writeBackup(this.#path, text, mode)
      } catch (e) {
        throw new ServicesFileError(this.#path, `cannot be backed up (${(e as Error).message})`, { cause: e })
      }
    })
    this.#queue = run.catch(() => undefined)
    return run
  }

  /**
   * Calls `onChange` with the new definitions when the file is changed by someone else (a hand
   * edit), for `--reload`. Watches the folder, so editors that replace the file are seen; events are
   * debounced (100 ms); content equal to what this process last wrote is ignored, and so is an edit
   * that changes only formatting. Content that is not a valid services file (an edit in progress) is
   * skipped and reported to `onError`, and so is a failing `onChange`. A picked-up edit also becomes
   * the base of the next `update`. Returns the function that stops watching.
   *
   * Throws `ServicesFileError` when the folder cannot be watched.
   */
  watch(onChange: (next: ServicesConfig) => void, onError?: (error: ServicesFileError) => void): () => void {
    const subscriber: Subscriber = { onChange, onError }
    if (this.#watcher === undefined) this.#startWatching()
    this.#subscribers.add(subscriber)
    return () => {
      if (!this.#subscribers.delete(subscriber)) return
      if (this.#subscribers.size === 0) this.#stopWatching()
    }
  }

  #startWatching(): void {
    const name = basename(this.#path)
    try {
      this.#watcher = watchFolder(dirname(this.#path), { persistent: true }, (_event, filename) => {
        if (filename !== null && filename !== name) return
        if (this.#timer !== undefined) clearTimeout(this.#timer)
        this.#timer = setTimeout(() => {
          this.#timer = undefined
          void this.#enqueueReload()
        }, DEBOUNCE_MS)
      })
    } catch (e) {
      throw new ServicesFileError(this.#path, `cannot be watched (${(e as Error).message})`, { cause: e })
    }
    this.#watcher.on("error", (e) => {
      this.#report(new ServicesFileError(this.#path, `cannot be watched (${e.message})`, { cause: e }))
    })
  }

  #stopWatching(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer)
    this.#timer = undefined
    this.#watcher?.close()
    this.#watcher = undefined
  }

  #report(error: ServicesFileError): void {
    for (const s of [...this.#subscribers]) s.onError?.(error)
  }

  /** Re-reads the file after the queued updates, so that this process's own writes are recognised. */
  #enqueueReload(): Promise<void> {
    const run = this.#queue.then(() => this.#reload())
    this.#queue = run.catch(() => undefined)
    return run.catch(() => undefined)
  }

  async #reload(): Promise<void> {
    if (this.#subscribers.size === 0) return
    let text: string
    try {
      text = await readFile(this.#path, "utf8")
    } catch (e) {
      // Between an editor's delete and its rename the file is briefly missing; the rename is seen next.
      if (errnoCode(e) !== "ENOENT") {
        this.#report(new ServicesFileError(this.#path, `cannot be read (${(e as Error).message})`, { cause: e }))
      }
      return
    }
    if (text === this.#text || this.#subscribers.size === 0) return
    let doc: JsonObject
    try {
      doc = parseDocument(this.#path, text)
    } catch (e) {
      if (e instanceof ServicesFileError) this.#report(e)
      return
    }
    const changed = canonicalJson(doc) !== canonicalJson(this.#doc)
    this.#adopt(doc, text)
    if (!changed) return
    const config = this.read()
    for (const s of [...this.#subscribers]) {
      try {
        s.onChange(config)
      } catch (e) {
        s.onError?.(new ServicesFileError(this.#path, `change handler failed (${(e as Error).message})`, { cause: e }))
      }
    }
  }
}
