/**
 * The OAuth secrets of upstream services at rest: tokens, client registrations and discovery
 * state, in one file beside the services file (`<services file>.oauth`), encrypted with AES-256-GCM
 * (node:crypto). The key comes from MCPSTORE_SECRET_KEY (any text, stretched with HKDF) or from a
 * key file created 0600 beside the services file on first use (`<services file>.key`). Entries are
 * keyed by (authorization server issuer, scope, service); the file is written atomically. Nothing
 * here is ever logged: a file that cannot be read is named, never shown.
 */
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from "node:crypto"
import { readFile, writeFile } from "node:fs/promises"
import type { OAuthClientInformationMixed, OAuthTokens } from "@modelcontextprotocol/sdk/shared/auth.js"
import type { OAuthDiscoveryState } from "@modelcontextprotocol/sdk/client/auth.js"
import { writeAtomically } from "../config/atomic-write.js"
import { log } from "./log.js"

/** What is kept for one service of one authorization server. */
export interface VaultEntry {
  /** The authorization server's URL (the SDK's binding key for tokens and registrations). */
  readonly issuer: string
  /** The scopes asked for (space-separated; "" when none). */
  readonly scope: string
  /** `<scope label>/<service name>`. */
  readonly service: string
  /** The origin of the service's URL when the tokens were obtained: another origin drops them. */
  readonly origin: string
  readonly tokens?: (OAuthTokens & { readonly obtained_at: number }) | undefined
  readonly client?: OAuthClientInformationMixed | undefined
  readonly discovery?: OAuthDiscoveryState | undefined
}

const ALGORITHM = "aes-256-gcm"

export class TokenVault {
  private entries = new Map<string, VaultEntry>()
  private key: Buffer | undefined
  /** One write at a time, in order. */
  private writing: Promise<void> = Promise.resolve()

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
      const sealed = JSON.parse(text) as { iv: string; tag: string; data: string }
      const decipher = createDecipheriv(ALGORITHM, key, Buffer.from(sealed.iv, "base64"))
      decipher.setAuthTag(Buffer.from(sealed.tag, "base64"))
      const plain = Buffer.concat([decipher.update(Buffer.from(sealed.data, "base64")), decipher.final()]).toString("utf8")
      for (const entry of JSON.parse(plain) as Array<VaultEntry>) vault.entries.set(keyOf(entry), entry)
    } catch (e) {
      log.warn(`OAuth token file ${vault.path} cannot be read (${e instanceof Error ? e.message : "unknown error"}): upstream services that need OAuth must be authorized again`, {
        event: "oauth_vault_unreadable",
        file: vault.path
      })
    }
    return vault
  }

  /** The entry of a service, if any. */
  find(service: string): VaultEntry | undefined {
    for (const entry of this.entries.values()) if (entry.service === service) return entry
    return undefined
  }

  /** Replaces the service's entry (any other issuer or scope of it is dropped) and writes the file. */
  put(entry: VaultEntry): Promise<void> {
    for (const [key, e] of this.entries) if (e.service === entry.service) this.entries.delete(key)
    this.entries.set(keyOf(entry), entry)
    return this.save()
  }

  /** Forgets everything of a service (delete_service, a new origin). */
  remove(service: string): Promise<void> {
    let removed = false
    for (const [key, e] of this.entries) {
      if (e.service === service) {
        this.entries.delete(key)
        removed = true
      }
    }
    return removed ? this.save() : this.writing
  }

  private save(): Promise<void> {
    const entries = [...this.entries.values()]
    this.writing = this.writing.then(async () => {
      const key = await this.secretKey(true)
      const iv = randomBytes(12)
      const cipher = createCipheriv(ALGORITHM, key as Buffer, iv)
      const data = Buffer.concat([cipher.update(JSON.stringify(entries), "utf8"), cipher.final()])
      const sealed = { v: 1, iv: iv.toString("base64"), tag: cipher.getAuthTag().toString("base64"), data: data.toString("base64") }
      await writeAtomically(this.path, `${JSON.stringify(sealed)}\n`)
    }).catch((e: unknown) => {
      log.error(`OAuth token file ${this.path} could not be written: ${e instanceof Error ? e.message : "unknown error"}`, { event: "oauth_vault_write_failed", file: this.path })
    })
    return this.writing
  }

  /** The key: from MCPSTORE_SECRET_KEY, else the key file (created 0600 when `create`). */
  private async secretKey(create: boolean): Promise<Buffer | undefined> {
    if (this.key !== undefined) return this.key
    const secret = await storeSecret(this.keyPath, create)
    if (secret === undefined) return undefined
    // The file's key is used as it is (files written before the sessions' sub-key existed stay readable).
    this.key = secret.from === "env" ? Buffer.from(hkdfSync("sha256", secret.secret, "mcp-store", "oauth-token-file", 32)) : secret.secret
    return this.key
  }
}

/**
 * The store's one secret, what its sealed things are keyed from (this file's tokens, the MCP
 * endpoint's sealed session ids: src/http/session-seal.ts, each with its own HKDF sub-key):
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
    const fresh = randomBytes(32)
    // O_EXCL: never overwrite a key another process just made (then read theirs).
    await writeFile(keyPath, `${fresh.toString("base64")}\n`, { mode: 0o600, flag: "wx" }).catch(() => undefined)
    key = Buffer.from((await readFile(keyPath, "utf8")).trim(), "base64")
  }
  if (key.length !== 32) throw new Error(`the key file ${keyPath} does not hold a 32-byte key`)
  return { from: "file", secret: key }
}

/** The key file of a services file. */
export const keyFileOf = (servicesFile: string): string => `${servicesFile}.key`

const keyOf = (entry: VaultEntry): string => JSON.stringify([entry.issuer, entry.scope, entry.service])
