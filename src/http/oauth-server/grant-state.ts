/**
 * What the built-in authorization server keeps, as one interface with two homes: one store's file
 * and memory (`FileGrantState`, here) and a cluster's Redis (`RedisGrantState`,
 * src/http/oauth-server/redis-grant-state.ts), as the token vault has its file and its Redis hash.
 * The logic (src/http/oauth-server/grants.ts) never knows which: each step that must be atomic
 * across replicas (a code redeemed once, a refresh token rotated once, a family revoked while a
 * token of it is being made) is one call here.
 *
 * The file (src/config/oauth-server-file.ts) holds approvals, registrations and refresh tokens
 * (hashed); codes, consents waiting, revoked access tokens and used client assertions are in
 * memory, each capped (the oldest dropped) and short-lived. No timer: expired entries are dropped
 * as new ones come.
 */
import { readFile, stat } from "node:fs/promises"
import { keepUnreadable } from "../../config/atomic-write.js"
import {
  ABSENT,
  fileVersion,
  OAuthServerFileError,
  oauthServerFileOf,
  readOAuthServerFile,
  writeOAuthServerFile,
  type ApprovedClient,
  type OAuthServerDocument,
  type RefreshRecord,
  type RegisteredClient
} from "../../config/oauth-server-file.js"
import { withFileLock } from "../../config/file-lock.js"
import { log } from "../../logging/log.js"

/** A checked authorization request. */
export interface CheckedRequest {
  readonly clientId: string
  readonly redirectUri: string
  readonly state: string | undefined
  readonly challenge: string
  readonly resource: string
  readonly agent: string
  readonly scope: string
}

/** A code given out, kept by the SHA-256 of the code. */
export interface CodeRecord extends CheckedRequest {
  readonly tools: ReadonlyArray<string> | null
  /** Epoch milliseconds. */
  readonly expires: number
}

/** A code as found: its record, and the family of its first exchange once it was exchanged. */
export interface FoundCode {
  readonly record: CodeRecord
  readonly used: boolean
  readonly family: string | undefined
}

/** What the consent page shows and posts back. */
export interface ConsentView {
  readonly request_id: string
  readonly client_id: string
  readonly client_name: string | null
  readonly redirect_uri: string
  readonly agent: string
  readonly tools: ReadonlyArray<string> | null
  readonly scope: string
}

/** A consent waiting for the operator. */
export interface PendingConsent {
  readonly view: ConsentView
  readonly request: CheckedRequest
  /** Epoch milliseconds. */
  readonly expires: number
}

/** The caps and lifetimes the logic asks the state to keep. */
export const GRANT_LIMITS = {
  codes: 1000,
  consents: 1000,
  registered: 1000,
  approved: 10_000,
  refresh: 100_000,
  revoked: 10_000,
  assertions: 10_000,
  /** A used code is remembered this long, to see a second use (and revoke what it gave). */
  usedCodeMs: 10 * 60_000
} as const

/** The state of the authorization server. Every method may reject when its store is away (Redis): the caller answers 503. */
export interface GrantState {
  approval(clientId: string): Promise<ApprovedClient | undefined>
  /** Stores an approval; false when `GRANT_LIMITS.approved` clients are approved already and this one is new. */
  putApproval(clientId: string, entry: ApprovedClient): Promise<boolean>
  registered(clientId: string): Promise<RegisteredClient | undefined>
  /** Stores a registration; past the cap the oldest registration not approved goes. */
  putRegistration(clientId: string, entry: RegisteredClient): Promise<void>

  refresh(hash: string): Promise<RefreshRecord | undefined>
  /** Marks a refresh token used: true for the one caller that rotated it, false when it was used already (or is gone). */
  rotateRefresh(hash: string): Promise<boolean>
  /** Stores a new refresh token, unless its family was revoked meanwhile (then nothing). */
  putRefresh(hash: string, record: RefreshRecord): Promise<void>
  /** Deletes a family's refresh tokens and refuses its access tokens until `until`; the client it was of. */
  revokeFamily(family: string, until: number): Promise<string | undefined>
  /** Every approved client, by id (at most `GRANT_LIMITS.approved`). */
  approvals(): Promise<ReadonlyArray<readonly [string, ApprovedClient]>>
  /**
   * Withdraws a client's approval and revokes every family of its refresh tokens (their access tokens
   * refused until `until`): how many families, or undefined when the client was not approved.
   */
  withdraw(clientId: string, until: number): Promise<{ readonly families: number } | undefined>

  putCode(hash: string, record: CodeRecord): Promise<void>
  code(hash: string): Promise<FoundCode | undefined>
  /** Exchanges a code for `family`: "first" for the one caller that did, else the family of the first exchange. */
  claimCode(hash: string, family: string): Promise<{ readonly first: true } | { readonly first: false; readonly family: string | undefined }>
  dropCode(hash: string): Promise<void>

  putConsent(id: string, pending: PendingConsent): Promise<void>
  /** Takes a consent waiting (at most one caller gets it). */
  takeConsent(id: string): Promise<PendingConsent | undefined>

  /** Refuses an access token (`jti`) until `until`. */
  revokeToken(jti: string, until: number): Promise<void>
  /** Whether a token's `jti` or family is revoked (synchronous: the protected resource asks on every request). */
  isRevoked(jti: string, family: string): boolean
  /** Records a client assertion's id: false when it was used already. */
  useAssertion(id: string, until: number): Promise<boolean>

  /** Resolves once the changes under way are written (shutdown). */
  flush(): Promise<void>
  close(): Promise<void>
}

/** Drops the oldest entries of a map past `max`. */
/** Whether a token's `jti` or its family is revoked at `now`, in a map of `jti:`/`fam:` keys to the end of their revocation. */
export const revokedIn = (revoked: ReadonlyMap<string, number>, jti: string, family: string, now: number): boolean => {
  const a = revoked.get(`jti:${jti}`)
  const b = revoked.get(`fam:${family}`)
  return (a !== undefined && a > now) || (b !== undefined && b > now)
}

export const capped = <K, V>(map: Map<K, V>, max: number): void => {
  while (map.size > max) map.delete(map.keys().next().value as K)
}

interface MemoryCode {
  readonly record: CodeRecord
  family: string | undefined
  used: boolean
}

/** One store's state: the file beside the services file, and memory. */
export class FileGrantState implements GrantState {
  private readonly file: string
  private doc: OAuthServerDocument = { version: 1, clients: {}, registered: {}, refresh: {} }
  /** The version of the file this state was read from or last wrote (`fileVersion`); none yet. */
  private version: string | undefined
  /** The version of the file `current` found unreadable (a half-done hand edit), until a change keeps it. */
  private unreadVersion: string | undefined
  private writing: Promise<void> = Promise.resolve()
  private readonly codes = new Map<string, MemoryCode>()
  private readonly consents = new Map<string, PendingConsent>()
  /** Revoked access tokens' `jti` and revoked families, until the last token they cover expires. */
  private readonly revoked = new Map<string, number>()
  private readonly assertions = new Map<string, number>()

  constructor(servicesFile: string, private readonly now: () => number = Date.now) {
    this.file = oauthServerFileOf(servicesFile)
  }

  flush(): Promise<void> {
    return this.writing
  }

  async close(): Promise<void> {
    await this.writing
  }

  /** The version of the file on disk now (`fileVersion`). */
  private onDisk(): Promise<string> {
    return stat(this.file).then(fileVersion, () => ABSENT)
  }

  /** Reads the file again when it changed (the CLI approves clients beside the running store). */
  private async current(): Promise<OAuthServerDocument> {
    await this.writing
    const version = await this.onDisk()
    if (version !== this.version) {
      try {
        const read = await readOAuthServerFile(this.file)
        this.doc = read.doc
        this.version = read.version
      } catch (e) {
        log.warn(`the authorization server file cannot be read, kept as it was: ${(e as Error).message}`, { event: "oauth_server_file" })
        this.version = version
        // Not read again for each request, but kept beside itself before the next change replaces it (`mutate`).
        this.unreadVersion = version
      }
    }
    return this.doc
  }

  /** Changes the document and writes it; one change at a time, each on the file as it is then. */
  private mutate(change: (doc: OAuthServerDocument) => OAuthServerDocument): Promise<void> {
    // Under the file's lock: the CLI changes the file too (approve-client, revoke-client).
    const run = this.writing.then(() => withFileLock(this.file, async () => {
      const version = await this.onDisk()
      if (version !== this.version || version === this.unreadVersion) {
        this.unreadVersion = undefined
        const read = await readOAuthServerFile(this.file).catch(async (e: unknown) => {
          // A hand edit left half done: kept beside the file before it is replaced.
          if (!(e instanceof OAuthServerFileError)) throw e
          await keepUnreadable(this.file, await readFile(this.file, "utf8"), "The authorization server file", "oauth_server_file_kept")
          return undefined
        })
        if (read !== undefined) this.doc = read.doc
      }
      this.doc = change(this.doc)
      // The version this write made: a change another process makes after it (the CLI) is another
      // version on disk, read before the next change, never written over.
      this.version = await writeOAuthServerFile(this.file, this.doc)
    }))
    this.writing = run.catch((e: unknown) => log.error(`the authorization server file cannot be written: ${String(e)}`, { event: "oauth_server_file" }))
    return run
  }

  /** Drops what expired from the in-memory maps. */
  private sweep(): void {
    const now = this.now()
    for (const [k, v] of this.codes) if ((v.used ? v.record.expires + GRANT_LIMITS.usedCodeMs : v.record.expires) <= now) this.codes.delete(k)
    for (const [k, v] of this.consents) if (v.expires <= now) this.consents.delete(k)
    for (const [k, until] of this.revoked) if (until <= now) this.revoked.delete(k)
    for (const [k, until] of this.assertions) if (until <= now) this.assertions.delete(k)
  }

  async approval(clientId: string): Promise<ApprovedClient | undefined> {
    const doc = await this.current()
    return Object.hasOwn(doc.clients, clientId) ? doc.clients[clientId] : undefined
  }

  async putApproval(clientId: string, entry: ApprovedClient): Promise<boolean> {
    const doc = await this.current()
    if (!Object.hasOwn(doc.clients, clientId) && Object.keys(doc.clients).length >= GRANT_LIMITS.approved) return false
    await this.mutate((d) => ({ ...d, clients: { ...d.clients, [clientId]: entry } }))
    return true
  }

  async approvals(): Promise<ReadonlyArray<readonly [string, ApprovedClient]>> {
    return Object.entries((await this.current()).clients)
  }

  async withdraw(clientId: string, until: number): Promise<{ readonly families: number } | undefined> {
    const doc = await this.current()
    if (!Object.hasOwn(doc.clients, clientId)) return undefined
    const families = [...new Set(Object.values(doc.refresh).filter((r) => r.client_id === clientId).map((r) => r.family))]
    // The families first: a withdrawal that fails half-way can be asked again (the approval is still there).
    for (const family of families) await this.revokeFamily(family, until)
    await this.mutate((d) => ({ ...d, clients: Object.fromEntries(Object.entries(d.clients).filter(([id]) => id !== clientId)) }))
    return { families: families.length }
  }

  async registered(clientId: string): Promise<RegisteredClient | undefined> {
    const doc = await this.current()
    return Object.hasOwn(doc.registered, clientId) ? doc.registered[clientId] : undefined
  }

  putRegistration(clientId: string, entry: RegisteredClient): Promise<void> {
    return this.mutate((d) => {
      const registered: Record<string, RegisteredClient> = Object.assign(Object.create(null) as Record<string, RegisteredClient>, d.registered)
      registered[clientId] = entry
      // Registration is open to anyone: past the cap the oldest registration not approved goes.
      for (const id of Object.keys(registered)) {
        if (Object.keys(registered).length <= GRANT_LIMITS.registered) break
        if (!Object.hasOwn(d.clients, id)) delete registered[id]
      }
      return { ...d, registered }
    })
  }

  async refresh(hash: string): Promise<RefreshRecord | undefined> {
    const doc = await this.current()
    return Object.hasOwn(doc.refresh, hash) ? doc.refresh[hash] : undefined
  }

  async rotateRefresh(hash: string): Promise<boolean> {
    await this.current()
    // Marked used before any wait: a second request with the same token, however close, is a reuse.
    const live = Object.hasOwn(this.doc.refresh, hash) ? this.doc.refresh[hash] : undefined
    if (live === undefined || live.used) return false
    const markUsed = (d: OAuthServerDocument): OAuthServerDocument => (Object.hasOwn(d.refresh, hash) ? { ...d, refresh: { ...d.refresh, [hash]: { ...d.refresh[hash]!, used: true } } } : d)
    this.doc = markUsed(this.doc)
    await this.mutate(markUsed)
    return true
  }

  putRefresh(hash: string, record: RefreshRecord): Promise<void> {
    const now = this.now()
    return this.mutate((d) => {
      // A family revoked while this token was made (a racing reuse) gets no new refresh token.
      const until = this.revoked.get(`fam:${record.family}`)
      if (until !== undefined && until > now) return d
      const kept = Object.entries(d.refresh).filter(([, r]) => r.expires > now)
      // Past the cap the tokens closest to expiry go first.
      if (kept.length >= GRANT_LIMITS.refresh) kept.sort(([, a], [, b]) => b.expires - a.expires).splice(GRANT_LIMITS.refresh - 1)
      return { ...d, refresh: Object.fromEntries([...kept, [hash, record]]) }
    })
  }

  async revokeFamily(family: string, until: number): Promise<string | undefined> {
    this.sweep()
    this.revoked.set(`fam:${family}`, until)
    capped(this.revoked, GRANT_LIMITS.revoked)
    let client: string | undefined
    await this.mutate((d) => {
      const refresh = Object.fromEntries(
        Object.entries(d.refresh).filter(([, r]) => {
          if (r.family !== family) return true
          client = r.client_id
          return false
        })
      )
      return { ...d, refresh }
    })
    return client
  }

  async putCode(hash: string, record: CodeRecord): Promise<void> {
    this.sweep()
    this.codes.set(hash, { record, family: undefined, used: false })
    capped(this.codes, GRANT_LIMITS.codes)
  }

  async code(hash: string): Promise<FoundCode | undefined> {
    const found = this.codes.get(hash)
    return found === undefined ? undefined : { record: found.record, used: found.used, family: found.family }
  }

  async claimCode(hash: string, family: string): Promise<{ readonly first: true } | { readonly first: false; readonly family: string | undefined }> {
    const found = this.codes.get(hash)
    if (found === undefined) return { first: false, family: undefined }
    if (found.used) return { first: false, family: found.family }
    found.used = true
    found.family = family
    return { first: true }
  }

  async dropCode(hash: string): Promise<void> {
    this.codes.delete(hash)
  }

  async putConsent(id: string, pending: PendingConsent): Promise<void> {
    this.sweep()
    this.consents.set(id, pending)
    capped(this.consents, GRANT_LIMITS.consents)
  }

  async takeConsent(id: string): Promise<PendingConsent | undefined> {
    const found = this.consents.get(id)
    this.consents.delete(id)
    return found !== undefined && found.expires > this.now() ? found : undefined
  }

  async revokeToken(jti: string, until: number): Promise<void> {
    this.sweep()
    this.revoked.set(`jti:${jti}`, until)
    capped(this.revoked, GRANT_LIMITS.revoked)
  }

  isRevoked(jti: string, family: string): boolean {
    return revokedIn(this.revoked, jti, family, this.now())
  }

  async useAssertion(id: string, until: number): Promise<boolean> {
    this.sweep()
    if (this.assertions.has(id)) return false
    this.assertions.set(id, until)
    capped(this.assertions, GRANT_LIMITS.assertions)
    return true
  }
}
