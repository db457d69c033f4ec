/**
 * The per-user credentials of `per_user` services at rest (README, Per-user credentials): each
 * principal's own header and environment values, in one file beside the services file
 * (`<services file>.credentials`), encrypted with AES-256-GCM under a sub-key of the store's secret
 * (src/config/token-vault.ts `storeSecret`), written atomically. Bounded: at most
 * `MAX_PRINCIPALS_PER_SERVICE` principals per service and `MAX_CREDENTIAL_BYTES` per credential.
 * Nothing here is ever logged: a file that cannot be read is named, never shown.
 */
import { hkdfSync } from "node:crypto"
import { readFile } from "node:fs/promises"
import { keepUnreadable, writeAtomically } from "./atomic-write.js"
import { keyFileOf, seal, storeSecret, unseal } from "./token-vault.js"
import { log } from "../logging/log.js"

/** One principal's own values for one service. */
export interface UserCredential {
  readonly headers: Readonly<Record<string, string>>
  readonly env: Readonly<Record<string, string>>
}

/** The most principals that may keep a credential for one service. */
export const MAX_PRINCIPALS_PER_SERVICE = 1_000
/** The largest credential (its names and values, as JSON). */
export const MAX_CREDENTIAL_BYTES = 16 * 1024

/**
 * Where credentials are kept: the file of one store, memory (a store built by hand), or the
 * cluster's Redis in replica mode (src/config/redis-credentials.ts). In replica mode a method may
 * fail with `ClusterUnavailable` (Redis away or hung: nothing changed).
 */
export interface CredentialStore {
  /** The credential of a principal for a service (`<scope label>/<service name>`), if any. */
  find(service: string, principal: string): Promise<UserCredential | undefined>
  /** Keeps a principal's credential; false when the service already has the most principals. Rejects when it could not be written. */
  put(service: string, principal: string, credential: UserCredential): Promise<boolean>
  /** Forgets a principal's credential; false when there was none. Rejects when it could not be written. */
  remove(service: string, principal: string): Promise<boolean>
  /** Forgets every credential of a service (it was deleted). */
  forget(service: string): Promise<void>
  /**
   * Calls `listener` when another store (a replica) changed a principal's credential of a service
   * (`principal` undefined: every credential of the service); returns the unsubscribe. Absent: no
   * other store shares these credentials.
   */
  onChange?(listener: (service: string, principal: string | undefined) => void): () => void
}

/** The sub-key the credentials are sealed with, in the file and in a cluster's Redis (apart from the OAuth file's and the sessions'). */
export const credentialsKey = (secret: Buffer | string): Buffer => Buffer.from(hkdfSync("sha256", secret, "mcp-store", "user-credentials", 32))

/** Credentials in memory, optionally written to an encrypted file after each change. */
export class CredentialsFile implements CredentialStore {
  private readonly services = new Map<string, Map<string, UserCredential>>()
  private key: Buffer | undefined
  private writing: Promise<void> = Promise.resolve()
  /** The file as found at start when it could not be read: kept beside it before the first write (`keepUnreadable`). */
  private unreadable: string | undefined

  private constructor(
    readonly path: string | undefined,
    private readonly keyPath: string | undefined
  ) {}

  /** Credentials kept in memory only (nothing written). */
  static inMemory(): CredentialsFile {
    return new CredentialsFile(undefined, undefined)
  }

  /** Opens the credentials of a services file; an unreadable file starts empty (with a warning). */
  static async open(servicesFile: string): Promise<CredentialsFile> {
    const file = new CredentialsFile(`${servicesFile}.credentials`, keyFileOf(servicesFile))
    let text: string
    try {
      text = await readFile(file.path as string, "utf8")
    } catch {
      return file
    }
    try {
      const key = await file.secretKey(false)
      if (key === undefined) throw new Error("no key (MCPSTORE_SECRET_KEY unset and no key file)")
      const content = JSON.parse(unseal(key, text)) as Record<string, Record<string, UserCredential>>
      for (const [service, principals] of Object.entries(content)) file.services.set(service, new Map(Object.entries(principals)))
    } catch (e) {
      file.unreadable = text
      log.warn(`Per-user credentials file ${file.path} cannot be read (${e instanceof Error ? e.message : "unknown error"}): principals must give their credentials again`, {
        event: "credentials_file_unreadable",
        file: file.path
      })
    }
    return file
  }

  find(service: string, principal: string): Promise<UserCredential | undefined> {
    return Promise.resolve(this.services.get(service)?.get(principal))
  }

  put(service: string, principal: string, credential: UserCredential): Promise<boolean> {
    return this.change(() => {
      let principals = this.services.get(service)
      if (principals?.has(principal) !== true && (principals?.size ?? 0) >= MAX_PRINCIPALS_PER_SERVICE) return undefined
      if (principals === undefined) this.services.set(service, (principals = new Map()))
      const before = principals.get(principal)
      principals.set(principal, credential)
      return () => this.restore(service, principal, before)
    })
  }

  remove(service: string, principal: string): Promise<boolean> {
    return this.change(() => {
      const before = this.services.get(service)?.get(principal)
      if (before === undefined) return undefined
      this.restore(service, principal, undefined)
      return () => this.restore(service, principal, before)
    })
  }

  forget(service: string): Promise<void> {
    return this.change(() => {
      const before = this.services.get(service)
      if (before === undefined) return undefined
      this.services.delete(service)
      return () => void this.services.set(service, before)
    }).then(() => undefined)
  }

  /** Puts a principal's credential back as it was (`undefined`: none). */
  private restore(service: string, principal: string, credential: UserCredential | undefined): void {
    let principals = this.services.get(service)
    if (credential === undefined) {
      principals?.delete(principal)
      if (principals?.size === 0) this.services.delete(service)
      return
    }
    if (principals === undefined) this.services.set(service, (principals = new Map()))
    principals.set(principal, credential)
  }

  /**
   * Makes a change in its turn after the changes before it, and writes the file: resolves true once
   * written (false when `apply` changed nothing, answering undefined), and rejects when the write
   * failed, the change then undone before the next one runs. So the credentials in use are always
   * those on file, or on their way to it, and a change answered with an error is in neither.
   */
  private change(apply: () => (() => void) | undefined): Promise<boolean> {
    const done = this.writing.then(async () => {
      const undo = apply()
      if (undo === undefined) return false
      if (this.path === undefined) return true
      try {
        await this.write(this.path)
      } catch (e) {
        undo()
        throw e
      }
      return true
    })
    // The change that asked is told of a failure; the queue goes on with the next one.
    this.writing = done.then(
      () => undefined,
      (e: unknown) => {
        log.error(`Per-user credentials file ${this.path} could not be written: ${e instanceof Error ? e.message : "unknown error"}`, { event: "credentials_file_write_failed", file: this.path })
      }
    )
    return done
  }

  private async write(path: string): Promise<void> {
    const content = Object.fromEntries([...this.services].map(([service, principals]) => [service, Object.fromEntries(principals)]))
    const key = await this.secretKey(true)
    if (this.unreadable !== undefined) await keepUnreadable(path, this.unreadable, "Per-user credentials file", "credentials_file_kept")
    this.unreadable = undefined
    await writeAtomically(path, `${seal(key as Buffer, JSON.stringify(content))}\n`)
  }

  private async secretKey(create: boolean): Promise<Buffer | undefined> {
    if (this.key !== undefined || this.keyPath === undefined) return this.key
    const secret = await storeSecret(this.keyPath, create)
    if (secret === undefined) return undefined
    this.key = credentialsKey(secret.secret)
    return this.key
  }
}
