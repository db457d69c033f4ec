/**
 * API keys with roles (README, Security): the keys file `mcp-store.keys.json` beside the services
 * file (or `--keys-file`), written by `mcp-store keys ...` (src/cli/keys-command.ts) and read, and
 * re-read on every change, by the running store; plus the admin keys of `--api-key` and
 * `MCPSTORE_API_KEY_FILE`.
 *
 * A key is `mcps_<id>_<secret>`: `<id>` (16 hex characters) names its entry, `<secret>` is 256
 * random bits. The file keeps only the SHA-256 of the whole key (a 256-bit random key needs no slow
 * hash: nobody can guess it from its digest), so a look-up is one map access and one constant-time
 * comparison of two digests, whatever the number of keys. The file is written atomically with mode
 * 0600 (src/config/atomic-write.ts), like the services file.
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto"
import { readFileSync, watch as watchFolder, type FSWatcher } from "node:fs"
import { readFile } from "node:fs/promises"
import { basename, dirname, join } from "node:path"
import { agentIdProblem } from "../domain/service-definition.js"
import { globsProblem, NO_TOOLS } from "../domain/tool-filter.js"
import { errnoCode, writeAtomically } from "./atomic-write.js"
import { jsonSyntaxProblem } from "./services-document.js"

/** What a key may reach (src/http/access.ts). */
export type Role = "admin" | "agent" | "reader"
export const ROLES: ReadonlyArray<Role> = ["admin", "agent", "reader"]

/** One key of the keys file: never the key itself. */
export interface KeyEntry {
  /** The id part of the key (`mcps_<id>_...`). */
  readonly id: string
  /** A label, unique in the file (`keys revoke <label>`). */
  readonly name: string
  readonly role: Role
  /** The agent an `agent` key is bound to. */
  readonly agent?: string | undefined
  /** Globs over callable names (`<service>__<tool>`) an agent key may see and call. */
  readonly tools?: ReadonlyArray<string> | undefined
  /** How the key's MCP requests list tools: `search` (search mode, README "Large catalogs") or `full`; absent: the store's default. */
  readonly tool_mode?: ToolMode | undefined
  /** SHA-256 of the whole key, hex. */
  readonly sha256: string
  readonly created: string
  readonly last_used: string | null
  readonly expires: string | null
  readonly revoked: string | null
}

/** The keys file's document. */
export interface KeysDocument {
  readonly version: 1
  readonly keys: ReadonlyArray<KeyEntry>
}

/** How an MCP client is listed tools: all of them, or search mode's `search_tools` and `call_tool`. */
export type ToolMode = "search" | "full"
export const TOOL_MODES: ReadonlyArray<ToolMode> = ["search", "full"]

/**
 * The principal a request acts as (src/http/authorization.ts `Principal`). `label` names it in log
 * lines and records (a key's name or id, an access token's subject and client), never a secret;
 * `subject` is set for an access token (src/http/oauth-resource/): its issuer and subject, which
 * outlive the token itself; `toolMode` is its key's `tool_mode`.
 */
export type Principal =
  | { readonly role: "admin"; readonly label?: string | undefined; readonly subject?: string | undefined; readonly toolMode?: ToolMode | undefined }
  | {
      readonly role: "agent"
      readonly agentId: string
      readonly tools?: ReadonlyArray<string> | undefined
      readonly label?: string | undefined
      readonly subject?: string | undefined
      readonly toolMode?: ToolMode | undefined
    }
  | { readonly role: "reader"; readonly label?: string | undefined; readonly subject?: string | undefined }

/** The principal of `--api-key` (and MCPSTORE_API_KEY_FILE): one object, made once. */
const ADMIN_KEY: Principal = { role: "admin", label: "--api-key" }

/** A keys file that cannot be read or is not a keys file. */
export class KeysFileError extends Error {
  override readonly name = "KeysFileError"
}

/** The keys file's default place: beside the services file. */
export const defaultKeysFile = (servicesFile: string): string => join(dirname(servicesFile), "mcp-store.keys.json")

const KEY_PATTERN = /^mcps_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$/

const sha256 = (text: string): Buffer => createHash("sha256").update(text).digest()

/** A new key and its entry (the key is shown once and never stored). */
export const newKey = (
  fields: { name?: string | undefined; role: Role; agent?: string | undefined; tools?: ReadonlyArray<string> | undefined; toolMode?: ToolMode | undefined; expiresDays?: number | undefined },
  now = Date.now()
) => {
  const id = randomBytes(8).toString("hex")
  const key = `mcps_${id}_${randomBytes(32).toString("base64url")}`
  const entry: KeyEntry = {
    id,
    name: fields.name ?? `${fields.role}${fields.agent === undefined ? "" : `-${fields.agent}`}-${id.slice(0, 6)}`,
    role: fields.role,
    ...(fields.agent === undefined ? {} : { agent: fields.agent }),
    ...(fields.tools === undefined ? {} : { tools: [...fields.tools] }),
    ...(fields.toolMode === undefined ? {} : { tool_mode: fields.toolMode }),
    sha256: sha256(key).toString("hex"),
    created: new Date(now).toISOString(),
    last_used: null,
    expires: fields.expiresDays === undefined ? null : new Date(now + fields.expiresDays * 86_400_000).toISOString(),
    revoked: null
  }
  return { key, entry }
}

const isIso = (v: unknown): v is string => typeof v === "string" && !Number.isNaN(Date.parse(v))
const orNull = (v: unknown): string | null => (isIso(v) ? v : null)

/** Checks one entry of the file; a problem as text. */
const entryOf = (raw: unknown, at: number): KeyEntry | string => {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) return `keys[${at}] must be an object`
  const e = raw as Record<string, unknown>
  if (typeof e["id"] !== "string" || !/^[0-9a-f]{16}$/.test(e["id"])) return `keys[${at}].id must be 16 hex characters`
  if (typeof e["name"] !== "string" || e["name"] === "" || e["name"].length > 100) return `keys[${at}].name must be a label of 1 to 100 characters`
  if (!ROLES.includes(e["role"] as Role)) return `keys[${at}].role must be one of ${ROLES.join(", ")}`
  if (typeof e["sha256"] !== "string" || !/^[0-9a-f]{64}$/.test(e["sha256"])) return `keys[${at}].sha256 must be 64 hex characters`
  const role = e["role"] as Role
  if (role === "agent" && (typeof e["agent"] !== "string" || agentIdProblem(e["agent"]) !== undefined)) return `keys[${at}].agent must be an agent id`
  const tools = e["tools"]
  if (tools !== undefined && globsProblem(tools) !== undefined) return `keys[${at}].tools ${globsProblem(tools)}`
  const toolMode = e["tool_mode"]
  if (toolMode !== undefined && !TOOL_MODES.includes(toolMode as ToolMode)) return `keys[${at}].tool_mode must be one of ${TOOL_MODES.join(", ")}`
  // A revocation or an expiry written by hand that is not a time is refused, not read as none (the key would go on working).
  for (const field of ["revoked", "expires"] as const) {
    if (e[field] !== undefined && e[field] !== null && !isIso(e[field])) return `keys[${at}].${field} must be null or a time (ISO 8601, as "2026-01-31T00:00:00Z")`
  }
  return {
    id: e["id"],
    name: e["name"],
    role,
    ...(role === "agent" ? { agent: e["agent"] as string } : {}),
    ...(tools === undefined ? {} : { tools: tools as string[] }),
    ...(toolMode === undefined ? {} : { tool_mode: toolMode as ToolMode }),
    sha256: e["sha256"],
    created: orNull(e["created"]) ?? new Date(0).toISOString(),
    last_used: orNull(e["last_used"]),
    expires: orNull(e["expires"]),
    revoked: orNull(e["revoked"])
  }
}

/** Parses a keys file's text; throws KeysFileError naming the problem. */
export const parseKeys = (path: string, text: string): KeysDocument => {
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {
    // The position only: JSON.parse's own message quotes the text around it, a key's hash or a label.
    throw new KeysFileError(`${path}: not valid JSON (${jsonSyntaxProblem(text)})`)
  }
  const keys = (parsed as { keys?: unknown } | null)?.keys
  if (!Array.isArray(keys)) throw new KeysFileError(`${path}: must be an object with a "keys" list`)
  const out: KeyEntry[] = []
  for (const [i, raw] of keys.entries()) {
    const entry = entryOf(raw, i)
    if (typeof entry === "string") throw new KeysFileError(`${path}: ${entry}`)
    out.push(entry)
  }
  return { version: 1, keys: out }
}

/** Reads the keys file; a missing file is an empty one. */
export const readKeys = async (path: string): Promise<KeysDocument> => {
  let text: string
  try {
    text = await readFile(path, "utf8")
  } catch (e) {
    if (errnoCode(e) === "ENOENT") return { version: 1, keys: [] }
    throw new KeysFileError(`${path}: cannot be read (${(e as Error).message})`)
  }
  return parseKeys(path, text)
}

/**
 * The file a running store writes its keys' last uses to, beside the keys file
 * (`mcp-store.keys.json` -> `mcp-store.keys.uses.json`): key id -> ISO time. The keys file itself is
 * written by the CLI alone, so a use noted by the store never writes over a key created or revoked
 * meanwhile.
 */
export const usesFileOf = (keysFile: string): string => `${keysFile.replace(/\.json$/i, "")}.uses.json`

/** The last uses the store wrote (`usesFileOf`); none when the file is absent or unreadable. */
export const readUses = async (keysFile: string): Promise<Map<string, string>> => {
  try {
    const parsed = JSON.parse(await readFile(usesFileOf(keysFile), "utf8")) as unknown
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return new Map()
    return new Map(Object.entries(parsed).filter((e): e is [string, string] => isIso(e[1])))
  } catch {
    return new Map()
  }
}

/** The keys with their last uses as the store wrote them (the later of the two times). */
export const withUses = (keys: ReadonlyArray<KeyEntry>, uses: ReadonlyMap<string, string>): ReadonlyArray<KeyEntry> =>
  keys.map((k) => {
    const used = uses.get(k.id)
    return used !== undefined && (k.last_used === null || Date.parse(used) > Date.parse(k.last_used)) ? { ...k, last_used: used } : k
  })

/** Writes the keys file (atomically, mode 0600). */
export const writeKeys = async (path: string, doc: KeysDocument): Promise<void> => void (await writeAtomically(path, `${JSON.stringify(doc, null, 2)}\n`))

/** Why an entry does not admit now, or undefined when it does. */
const refusal = (entry: KeyEntry, now: number): "revoked" | "expired" | undefined =>
  entry.revoked !== null ? "revoked" : entry.expires !== null && Date.parse(entry.expires) <= now ? "expired" : undefined

/** What a presented key is. */
export type KeyCheck =
  | { readonly ok: true; readonly principal: Principal; readonly label: string }
  | { readonly ok: false; readonly why: "missing" | "unknown" | "revoked" | "expired" }

/** How often the store writes `last_used` back to the file, at most. */
const LAST_USED_WRITE_MS = 60_000
/** Debounce of the file watcher, as the services file's. */
const DEBOUNCE_MS = 100

/**
 * The keys the running store admits: the admin keys of the options, and the keys file, re-read
 * whenever it changes (a bad edit keeps the keys as they were, and is logged by `onProblem`).
 */
export class KeyRing {
  #entries = new Map<string, KeyEntry>()
  readonly #admins: ReadonlyArray<Buffer>
  #watcher: FSWatcher | undefined
  #timer: NodeJS.Timeout | undefined
  #usedTimer: NodeJS.Timeout | undefined
  readonly #used = new Map<string, string>()
  #listeners = new Set<() => void>()
  #closed = false
  #usesSink: ((used: ReadonlyMap<string, string>) => Promise<void>) | undefined

  constructor(
    readonly path: string,
    adminKeys: ReadonlyArray<string>,
    private readonly onProblem: (message: string) => void = () => undefined,
    /** `--deny-by-default`: an agent key without a `tools` list gets an empty one (it sees no tool). */
    private readonly denyByDefault = false
  ) {
    this.#admins = adminKeys.map(sha256)
  }

  /** Reads the file now (synchronously: at start-up, before the first request). */
  loadSync(): void {
    let text: string
    try {
      text = readFileSync(this.path, "utf8")
    } catch (e) {
      if (errnoCode(e) === "ENOENT") return this.#adopt({ version: 1, keys: [] })
      throw new KeysFileError(`${this.path}: cannot be read (${(e as Error).message})`)
    }
    this.#adopt(parseKeys(this.path, text))
  }

  #adopt(doc: KeysDocument): void {
    if (this.#locked && doc.keys.length === 0 && this.#entries.size > 0) {
      this.onProblem(`the keys file ${this.path} is gone or holds no key: none of its keys is taken any more, and the store still requires a key (restart it to run without keys)`)
    }
    this.#entries = new Map(doc.keys.map((k) => [k.id, k]))
    this.#locked ||= this.required
    for (const l of [...this.#listeners]) l()
  }

  /** A key was required once: it stays required, so a keys file deleted or emptied while the store runs never opens it to anyone. */
  #locked = false

  /** Whether any key is required: an admin key given, or the keys file holds a key (or held one since the start). */
  get required(): boolean {
    return this.#locked || this.#admins.length > 0 || this.#entries.size > 0
  }

  /** Called after every reload of the file (tests wait on it). Returns the unsubscribe. */
  onReload(listener: () => void): () => void {
    this.#listeners.add(listener)
    return () => void this.#listeners.delete(listener)
  }

  /** The principal of an `Authorization` header's bearer token. */
  check(header: string | undefined, now = Date.now()): KeyCheck {
    const token = header !== undefined && /^bearer /i.test(header) ? header.slice("Bearer ".length) : ""
    if (token === "") return { ok: false, why: "missing" }
    const digest = sha256(token)
    const m = KEY_PATTERN.exec(token)
    if (m !== null) {
      const entry = this.#entries.get(m[1]!)
      if (entry === undefined || !timingSafeEqual(digest, Buffer.from(entry.sha256, "hex"))) return { ok: false, why: "unknown" }
      const why = refusal(entry, now)
      if (why !== undefined) return { ok: false, why }
      this.#touch(entry.id, now)
      const principal: Principal =
        entry.role === "agent"
          ? {
              role: "agent",
              agentId: entry.agent!,
              label: entry.name,
              ...(entry.tools !== undefined ? { tools: entry.tools } : this.denyByDefault ? { tools: NO_TOOLS } : {}),
              ...(entry.tool_mode !== undefined ? { toolMode: entry.tool_mode } : {})
            }
          : entry.role === "admin" && entry.tool_mode !== undefined
            ? { role: "admin", label: entry.name, toolMode: entry.tool_mode }
            : { role: entry.role, label: entry.name }
      return { ok: true, principal, label: entry.name }
    }
    // Every admin key is compared, so the time taken does not tell which one matched.
    let match = false
    for (const admin of this.#admins) match = timingSafeEqual(digest, admin) || match
    return match ? { ok: true, principal: ADMIN_KEY, label: "--api-key" } : { ok: false, why: "unknown" }
  }

  /**
   * Where `last_used` goes instead of the file: in a cluster, a Redis hash (src/config/redis-key-uses.ts),
   * so that replicas sharing one keys file never rewrite it (nor fight over it).
   */
  writeUsesTo(sink: (used: ReadonlyMap<string, string>) => Promise<void>): void {
    this.#usesSink = sink
  }

  /** Notes a use; written at most once a minute (`usesFileOf`, or the sink), merged with what is there. */
  #touch(id: string, now: number): void {
    const at = new Date(now).toISOString()
    this.#used.set(id, at)
    if (this.#usedTimer !== undefined || this.#closed) return
    this.#usedTimer = setTimeout(() => void this.#writeUsed(), LAST_USED_WRITE_MS)
    this.#usedTimer.unref()
  }

  async #writeUsed(): Promise<void> {
    this.#usedTimer = undefined
    if (this.#used.size === 0) return
    const used = new Map(this.#used)
    this.#used.clear()
    try {
      if (this.#usesSink !== undefined) return await this.#usesSink(used)
      // The later time of each key the file still holds (a key gone leaves the file with its next write).
      const uses = await readUses(this.path)
      for (const [id, at] of used) if (!uses.has(id) || Date.parse(uses.get(id)!) < Date.parse(at)) uses.set(id, at)
      const kept = [...uses].filter(([id]) => this.#entries.has(id))
      await writeAtomically(usesFileOf(this.path), `${JSON.stringify(Object.fromEntries(kept), null, 1)}\n`)
    } catch (e) {
      this.onProblem(`the keys' last uses could not be written to ${usesFileOf(this.path)}: ${(e as Error).message}`)
    }
  }

  /** Re-reads the file whenever it changes (the folder is watched, so editors' renames are seen). */
  watch(): void {
    if (this.#watcher !== undefined) return
    const name = basename(this.path)
    try {
      this.#watcher = watchFolder(dirname(this.path), { persistent: false }, (_event, filename) => {
        if (filename !== null && filename !== name) return
        if (this.#timer !== undefined) clearTimeout(this.#timer)
        this.#timer = setTimeout(() => {
          this.#timer = undefined
          void this.#reload()
        }, DEBOUNCE_MS)
      })
      this.#watcher.on("error", (e) => this.onProblem(`the keys file ${this.path} cannot be watched (${e.message})`))
    } catch (e) {
      this.onProblem(`the keys file ${this.path} cannot be watched (${(e as Error).message}); changes need a restart`)
    }
  }

  async #reload(): Promise<void> {
    if (this.#closed) return
    try {
      this.#adopt(await readKeys(this.path))
    } catch (e) {
      this.onProblem(`${(e as Error).message}; the keys as they were are kept`)
    }
  }

  /** Stops watching and writes the pending `last_used` times. */
  async close(): Promise<void> {
    this.#closed = true
    if (this.#timer !== undefined) clearTimeout(this.#timer)
    this.#watcher?.close()
    this.#watcher = undefined
    if (this.#usedTimer !== undefined) {
      clearTimeout(this.#usedTimer)
      await this.#writeUsed()
    }
  }
}

/** The admin key of `MCPSTORE_API_KEY_FILE`: the file's first line, trimmed. */
export const readApiKeyFile = (path: string): string => {
  let text: string
  try {
    text = readFileSync(path, "utf8")
  } catch (e) {
    throw new KeysFileError(`the API key file ${path} cannot be read (${(e as Error).message})`)
  }
  const key = (text.split(/\r?\n/, 1)[0] ?? "").trim()
  if (key === "") throw new KeysFileError(`the API key file ${path} is empty`)
  return key
}
