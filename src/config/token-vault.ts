/**
 * The OAuth secrets of upstream services at rest: tokens, client registrations and discovery
 * state, in one file beside the services file (`<services file>.oauth`), encrypted with AES-256-GCM
 * (node:crypto). The key comes from MCPSTORE_SECRET_KEY (any text, stretched with HKDF) or from a
 * key file created 0600 beside the services file on first use (`<services file>.key`). One entry
 * per service key (a service's own, or one principal's of a `per_user` service), holding its
 * authorization server issuer and scope; the file is written atomically. Nothing
 * here is ever logged: a file that cannot be read is named, never shown.
 *
 * Entries are bound as SDK v2 binds them (`reboundEntry`): to the authorization server's `issuer`
 * as its metadata states it. Entries written by the store on SDK 1.x, bound to the URL discovery
 * used, are rebound when read (the file is written again once), so no upgrade asks for a new
 * authorization.
 *
 * Beside them, the authorizations under way (`PendingRecord`: state, PKCE verifier, redirect URI,
 * expiry), so that a store restarted while a user authorizes still finishes the flow; expired ones
 * are left out when the file is read and written.
 */
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from "node:crypto"
import { link, open, readFile, rm, writeFile } from "node:fs/promises"
import { basename, dirname, join } from "node:path"
import type { OAuthDiscoveryState, StoredOAuthClientInformation, StoredOAuthTokens } from "@modelcontextprotocol/client"
import { errnoCode, keepUnreadable, writeAtomically } from "./atomic-write.js"
import { log } from "../logging/log.js"

/** What is kept for one service of one authorization server. */
export interface VaultEntry {
  /**
   * The authorization server's issuer (the SDK's binding key for tokens and registrations): its
   * metadata's `issuer`, else the URL discovery used ("" before any discovery).
   */
  readonly issuer: string
  /** The scopes asked for (space-separated; "" when none). */
  readonly scope: string
  /** `<scope label>/<service name>`. */
  readonly service: string
  /** The origin of the service's URL when the tokens were obtained: another origin drops them. */
  readonly origin: string
  readonly tokens?: (StoredOAuthTokens & { readonly obtained_at: number }) | undefined
  /** The client registration the tokens were issued to (refreshes use it); before any tokens, the last one made. */
  readonly client?: StoredOAuthClientInformation | undefined
  readonly discovery?: OAuthDiscoveryState | undefined
}

/** An authorization under way, as kept (src/runtime/upstream-oauth.ts `Pending`, with its `state`). */
export interface PendingRecord {
  readonly state: string
  /** `<scope label>/<service name>`. */
  readonly service: string
  readonly scope: { readonly kind: "store" } | { readonly kind: "agent"; readonly agentId: string }
  readonly name: string
  /** The principal a `per_user` authorization is for (src/runtime/upstream-oauth.ts `principalKey`); absent: the service's own. */
  readonly principal?: string | undefined
  /** Who started the authorization, in words, when the callback asks the browser to confirm it first. */
  readonly startedBy?: string | undefined
  readonly verifier: string
  readonly redirectUri: string
  /** The client registration the flow uses, when it is not the service's (its redirect URI differs). */
  readonly client?: StoredOAuthClientInformation | undefined
  /** Epoch milliseconds. */
  readonly expiresAt: number
}

/** Whether two issuers name the same authorization server (SDK v2's rule: one trailing `/` of difference is tolerated). */
const sameIssuer = (a: string, b: string): boolean => a === b || (a.endsWith("/") && a.slice(0, -1) === b) || (b.endsWith("/") && b.slice(0, -1) === a)

/** The issuer SDK v2 binds a flow's registrations and tokens to: the metadata's, else the URL discovery used. */
export const issuerOf = (discovery: OAuthDiscoveryState): string => discovery.authorizationServerMetadata?.issuer ?? String(discovery.authorizationServerUrl)

/**
 * An entry bound as SDK v2 binds it: to the issuer its authorization server's metadata states
 * (else to the URL discovery used, as SDK 1.x bound everything). SDK v2 presents a registration
 * only to the issuer it is stamped with, so an entry written on SDK 1.x (stamped with the
 * discovery URL, or not stamped at all by its older versions) is rebound: the entry's `issuer`,
 * and the registration's and tokens' stamps that named the old binding or none. A stamp naming
 * another issuer is left as it is (never presented elsewhere). Metadata whose `issuer` is not the
 * URL it was discovered at (SDK 1.x took it; SDK v2 refuses it on discovery, RFC 8414, but trusts
 * what it is given back) is dropped instead, stamps as they are: the next flow discovers and
 * checks it again, so an authorization server never keeps an issuer of its own choosing. The same
 * object when nothing changes, so reading it twice changes nothing.
 */
export const reboundEntry = (entry: VaultEntry): VaultEntry => {
  const discovery = entry.discovery
  if (discovery === undefined) return entry
  const claimed = discovery.authorizationServerMetadata?.issuer
  if (claimed !== undefined && !sameIssuer(claimed, String(discovery.authorizationServerUrl))) {
    const { discovery: _unchecked, ...kept } = entry
    return kept
  }
  const bound = issuerOf(discovery)
  const old = [String(discovery.authorizationServerUrl), entry.issuer].filter((i) => i !== "")
  const stale = (issuer: unknown): boolean => issuer !== bound && (typeof issuer !== "string" || old.some((o) => sameIssuer(o, issuer)))
  const client = entry.client !== undefined && stale(entry.client.issuer) ? { ...entry.client, issuer: bound } : entry.client
  const tokens = entry.tokens !== undefined && stale(entry.tokens.issuer) ? { ...entry.tokens, issuer: bound } : entry.tokens
  const issuer = entry.issuer === "" || stale(entry.issuer) ? bound : entry.issuer
  if (client === entry.client && tokens === entry.tokens && issuer === entry.issuer) return entry
  return { ...entry, issuer, ...(client !== undefined ? { client } : {}), ...(tokens !== undefined ? { tokens } : {}) }
}

const ALGORITHM = "aes-256-gcm"

/** The 256-bit key of a secret text (MCPSTORE_SECRET_KEY): HKDF-SHA256, the same for the file and for Redis. */
export const keyOfSecret = (secret: string | Buffer): Buffer => Buffer.from(hkdfSync("sha256", secret, "mcp-store", "oauth-token-file", 32))

/** Text encrypted with AES-256-GCM under `key`, as JSON (`v`, `iv`, `tag`, `data`, base64). */
export const seal = (key: Buffer, plain: string): string => {
  const iv = randomBytes(12)
  const cipher = createCipheriv(ALGORITHM, key, iv)
  const data = Buffer.concat([cipher.update(plain, "utf8"), cipher.final()])
  return JSON.stringify({ v: 1, iv: iv.toString("base64"), tag: cipher.getAuthTag().toString("base64"), data: data.toString("base64") })
}

/** The text of `seal`; throws when the key is wrong or the text was changed. */
export const unseal = (key: Buffer, text: string): string => {
  const sealed = JSON.parse(text) as { iv: string; tag: string; data: string }
  const decipher = createDecipheriv(ALGORITHM, key, Buffer.from(sealed.iv, "base64"))
  decipher.setAuthTag(Buffer.from(sealed.tag, "base64"))
  return Buffer.concat([decipher.update(Buffer.from(sealed.data, "base64")), decipher.final()]).toString("utf8")
}

/**
 * Where OAuth entries are kept: the file of one store (`TokenVault`) or a cluster's Redis hash
 * (src/config/redis-token-vault.ts `RedisTokenStore`), encrypted either way.
 */
export interface TokenStore {
  /** The entry of a service, if any. */
  find(service: string): VaultEntry | undefined
  /** The entries whose key starts with `prefix` (a `per_user` service's principals' own: `<service>\u0000`). */
  entriesUnder(prefix: string): ReadonlyArray<VaultEntry>
  /** Replaces the service's entry (any other issuer or scope of it is dropped). */
  put(entry: VaultEntry): Promise<void>
  /** Forgets everything of a service. */
  remove(service: string): Promise<void>
  /**
   * Runs a refresh of the service's tokens while no other process refreshes them, with the entry
   * as stored when it starts (another process may have refreshed meanwhile: then its tokens are
   * used, not refreshed again; a rotated refresh token must never be spent twice). `lapse`, when
   * the exclusion lasts a limited time (a cluster's lock), aborts while it still holds: the task
   * stops its requests then, so that no other process refreshes with the same token meanwhile.
   */
  exclusive<A>(service: string, task: (latest: VaultEntry | undefined, lapse: AbortSignal | undefined) => Promise<A>): Promise<A>
  /** The authorizations under way that have not expired, oldest first. */
  pendingRecords(): ReadonlyArray<PendingRecord>
  /** Releases what it holds beyond memory (a Redis listener), if anything. */
  close?(): Promise<void>
  /** Keeps an authorization under way (encrypted, until it expires). */
  putPending(record: PendingRecord): Promise<void>
  /** Forgets an authorization under way; `write` false may defer the write to the next one. */
  removePending(state: string, write: boolean): Promise<void>
  /** An authorization under way as kept now (any replica's, in a cluster), without taking it. */
  findPending(state: string): Promise<PendingRecord | undefined>
  /**
   * Takes an authorization under way, once: of two takers at the same moment (two replicas of a
   * cluster), one gets it and the other nothing.
   */
  takePending(state: string): Promise<PendingRecord | undefined>
  /**
   * Reads a service's entry from where it is shared (a cluster's Redis) into `find`'s copy, when
   * the copy may be stale; absent: `find` is always current (the file of one store).
   */
  readThrough?(service: string): Promise<void>
}

export class TokenVault implements TokenStore {
  /** The entries by service key (one per service: a `put` replaces any other issuer or scope of it), so a look-up is not a scan. */
  private entries = new Map<string, VaultEntry>()
  /** Authorizations under way by state (bounded by their owner, src/runtime/upstream-oauth.ts). */
  private readonly pending = new Map<string, PendingRecord>()
  private key: Buffer | undefined
  /** One write at a time, in order. */
  private writing: Promise<void> = Promise.resolve()
  /** The file as found at start when it could not be read: kept beside it before the first write (`keepUnreadable`). */
  private unreadable: string | undefined

  private constructor(
    readonly path: string,
    private readonly keyPath: string
  ) {}

  /** Opens the vault of a services file; an unreadable one starts empty (with a warning). */
  static async open(servicesFile: string): Promise<TokenVault> {
    const vault = new TokenVault(`${servicesFile}.oauth`, keyFileOf(servicesFile))
    let text: string
    try {
      text = await readFile(vault.path, "utf8")
    } catch {
      return vault
    }
    try {
      const key = await vault.secretKey(false)
      if (key === undefined) throw new Error("no key (MCPSTORE_SECRET_KEY unset and no key file)")
      const plain = unseal(key, text)
      // Version 1 held the entries alone; version 2 holds them and the authorizations under way.
      const content = JSON.parse(plain) as Array<VaultEntry> | { entries: Array<VaultEntry>; pending?: Array<PendingRecord> }
      let rebound = false
      for (const stored of Array.isArray(content) ? content : content.entries) {
        const entry = reboundEntry(stored)
        rebound ||= entry !== stored
        vault.entries.set(entry.service, entry)
      }
      const now = Date.now()
      for (const p of Array.isArray(content) ? [] : (content.pending ?? [])) if (p.expiresAt > now) vault.pending.set(p.state, p)
      // Entries of SDK 1.x rebound: written so once (a later read finds them bound).
      if (rebound) {
        await vault.save()
        log.info(`OAuth token file ${vault.path}: entries rebound to their authorization server's issuer`, { event: "oauth_vault_migrated", file: vault.path })
      }
    } catch (e) {
      vault.unreadable = text
      log.warn(`OAuth token file ${vault.path} cannot be read (${e instanceof Error ? e.message : "unknown error"}): upstream services that need OAuth must be authorized again`, {
        event: "oauth_vault_unreadable",
        file: vault.path
      })
    }
    return vault
  }

  /** The entry of a service, if any. */
  find(service: string): VaultEntry | undefined {
    return this.entries.get(service)
  }

  /** The entries whose key starts with `prefix` (a service's principals'). */
  entriesUnder(prefix: string): ReadonlyArray<VaultEntry> {
    return [...this.entries.values()].filter((e) => e.service.startsWith(prefix))
  }

  /** Replaces the service's entry (any other issuer or scope of it is dropped) and writes the file. */
  put(entry: VaultEntry): Promise<void> {
    this.entries.set(entry.service, entry)
    return this.save()
  }

  /** One process refreshes alone already (ServiceAuth's single flight): the task runs at once, for as long as it takes. */
  exclusive<A>(service: string, task: (latest: VaultEntry | undefined, lapse: AbortSignal | undefined) => Promise<A>): Promise<A> {
    return task(this.find(service), undefined)
  }

  /** Forgets everything of a service (delete_service, a new origin). */
  remove(service: string): Promise<void> {
    return this.entries.delete(service) ? this.save() : this.writing
  }

  /** The authorizations under way that have not expired, oldest first. */
  pendingRecords(): ReadonlyArray<PendingRecord> {
    const now = Date.now()
    return [...this.pending.values()].filter((p) => p.expiresAt > now).sort((a, b) => a.expiresAt - b.expiresAt)
  }

  /** Keeps an authorization under way, and writes the file. */
  putPending(record: PendingRecord): Promise<void> {
    this.pending.set(record.state, record)
    return this.save()
  }

  /** Forgets an authorization under way; writes the file when `write` (else with the next write). */
  removePending(state: string, write: boolean): Promise<void> {
    return this.pending.delete(state) && write ? this.save() : this.writing
  }

  /** An authorization under way, without taking it. */
  findPending(state: string): Promise<PendingRecord | undefined> {
    return Promise.resolve(this.pending.get(state))
  }

  /** Takes an authorization under way (one process: the map is the only copy in use), and writes the file. */
  async takePending(state: string): Promise<PendingRecord | undefined> {
    const record = this.pending.get(state)
    if (record === undefined) return undefined
    this.pending.delete(state)
    await this.save()
    return record
  }

  /**
   * Writes the file, after the writes before it: resolves once this one is written, rejects when it
   * could not be (the change that asked is told; it stays in memory, and goes with the next write).
   */
  private save(): Promise<void> {
    const written = this.writing.then(async () => {
      // The entries as they are when the write runs: a later change already in memory goes with it.
      const entries = [...this.entries.values()]
      const now = Date.now()
      const pending = [...this.pending.values()].filter((p) => p.expiresAt > now)
      const key = await this.secretKey(true)
      if (this.unreadable !== undefined) await keepUnreadable(this.path, this.unreadable, "OAuth token file", "oauth_vault_kept")
      this.unreadable = undefined
      await writeAtomically(this.path, `${seal(key as Buffer, JSON.stringify({ entries, pending }))}\n`)
    })
    this.writing = written.catch((e: unknown) => {
      log.error(`OAuth token file ${this.path} could not be written: ${e instanceof Error ? e.message : "unknown error"}`, { event: "oauth_vault_write_failed", file: this.path })
    })
    return written
  }

  /** The key: from MCPSTORE_SECRET_KEY, else the key file (created 0600 when `create`). */
  private async secretKey(create: boolean): Promise<Buffer | undefined> {
    if (this.key !== undefined) return this.key
    const secret = await storeSecret(this.keyPath, create)
    if (secret === undefined) return undefined
    // The file's key is used as it is (files written before the sessions' sub-key existed stay readable).
    this.key = secret.from === "env" ? keyOfSecret(secret.secret) : secret.secret
    return this.key
  }
}

/**
 * The store's one secret, what its sealed things are keyed from (this file's tokens, the MCP
 * endpoint's sealed session ids: src/http/gateway/session-seal.ts, each with its own HKDF sub-key):
 * MCPSTORE_SECRET_KEY (any text) when set, else the 32 bytes of the key file `keyPath`
 * (`<services file>.key`), created 0600 when `create` and it does not exist yet.
 */
export const storeSecret = async (keyPath: string, create: boolean): Promise<{ readonly from: "env" | "file"; readonly secret: Buffer } | undefined> => {
  const secret = process.env["MCPSTORE_SECRET_KEY"]
  if (secret !== undefined && secret !== "") return { from: "env", secret: Buffer.from(secret, "utf8") }
  let key: Buffer
  try {
    key = Buffer.from((await readFile(keyPath, "utf8")).trim(), "base64")
  } catch {
    if (!create) return undefined
    await createKeyFile(keyPath)
    key = Buffer.from((await readFile(keyPath, "utf8")).trim(), "base64")
  }
  if (key.length !== 32) throw new Error(`the key file ${keyPath} does not hold a 32-byte key`)
  return { from: "file", secret: key }
}

/**
 * Makes a new key file whole (written and flushed under a temporary name, 0600), then links it in
 * place only if no key file is there yet: a crash never leaves an empty or half-written key file,
 * and a key another process just made is never replaced (theirs is read then).
 */
const createKeyFile = async (keyPath: string): Promise<void> => {
  const tmp = join(dirname(keyPath), `.${basename(keyPath)}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`)
  const handle = await open(tmp, "wx", 0o600)
  try {
    await handle.writeFile(`${randomBytes(32).toString("base64")}\n`)
    await handle.sync()
  } finally {
    await handle.close()
  }
  try {
    await link(tmp, keyPath)
  } catch (e) {
    if (errnoCode(e) === "EEXIST") return
    // A file system without hard links (some FUSE, SMB or exFAT mounts): created in place, never over another's.
    await writeFile(keyPath, await readFile(tmp), { mode: 0o600, flag: "wx" }).catch((e: unknown) => {
      if (errnoCode(e) !== "EEXIST") throw e
    })
  } finally {
    await rm(tmp, { force: true })
  }
}

/** The key file of a services file. */
export const keyFileOf = (servicesFile: string): string => `${servicesFile}.key`

