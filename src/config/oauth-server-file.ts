/**
 * The built-in authorization server's file (`<services file>.oauth-server.json`, 0600, written
 * atomically): the clients an operator approved and the principal each is bound to, the clients
 * registered dynamically, and the refresh tokens, each kept as the SHA-256 of the token only. Both
 * the running store (src/http/oauth-server/grants.ts) and `mcp-store auth approve-client`
 * (src/cli/oauth-clients-command.ts) read and write it; the store re-reads it when it changed.
 * Nothing here can be used as a credential: client secrets and tokens are hashes.
 */
import { createHash, randomBytes } from "node:crypto"
import { readFile, stat } from "node:fs/promises"
import { writeAtomically } from "./atomic-write.js"

/** A client the operator approved, bound to an agent and its tool list. */
export interface ApprovedClient {
  readonly agent: string
  /** Globs over callable names the client's tokens may see and call; null: every tool of the agent. */
  readonly tools: ReadonlyArray<string> | null
  /** A machine client (client credentials grant). */
  readonly machine: boolean
  /** SHA-256 (hex) of the client secret printed once by `--machine`; null without one. */
  readonly secret_sha256: string | null
  readonly approved: string
  /** Who approved: `cli`, `api` (the admin route) or `consent` (the consent page). */
  readonly approved_by: "cli" | "api" | "consent"
}

/** A client registered by Dynamic Client Registration (a public client: no secret). */
export interface RegisteredClient {
  readonly redirect_uris: ReadonlyArray<string>
  readonly client_name: string | null
  readonly created: string
}

/** A refresh token, by the SHA-256 of the token. */
export interface RefreshRecord {
  /** The family: every token rotated from one authorization; a reused token revokes it whole. */
  readonly family: string
  readonly client_id: string
  readonly agent: string
  readonly tools: ReadonlyArray<string> | null
  readonly resource: string
  readonly scope: string
  /** Epoch milliseconds. */
  readonly expires: number
  /** Rotated already: presenting it again is a reuse. */
  readonly used: boolean
  /** Its client must authenticate to use it (a secret or private_key_jwt when it was first given); absent in a file of an older version: its client's document decides. */
  readonly confidential?: boolean
}

export interface OAuthServerDocument {
  readonly version: 1
  readonly clients: Readonly<Record<string, ApprovedClient>>
  readonly registered: Readonly<Record<string, RegisteredClient>>
  readonly refresh: Readonly<Record<string, RefreshRecord>>
}

export const EMPTY_DOCUMENT: OAuthServerDocument = { version: 1, clients: {}, registered: {}, refresh: {} }

/** The file beside a services file. */
export const oauthServerFileOf = (servicesFile: string): string => `${servicesFile}.oauth-server.json`

/** A file that exists but is not this file. */
export class OAuthServerFileError extends Error {
  override readonly name = "OAuthServerFileError"
}

/** SHA-256 in hex: how secrets and tokens are kept. */
export const sha256 = (text: string): string => createHash("sha256").update(text, "utf8").digest("hex")

/** A fresh secret or token: 256 random bits, base64url. */
export const freshSecret = (): string => randomBytes(32).toString("base64url")

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v)

/** What tells one version of the file from another: every atomic replace is a new inode, and a time's tick can hold two writes. */
export const fileVersion = (s: { readonly ino: number; readonly mtimeMs: number; readonly size: number }): string => `${s.ino}:${s.mtimeMs}:${s.size}`
/** The version of a file that does not exist. */
export const ABSENT = "absent"

/** The document of `path` (empty when the file does not exist), with its version (`fileVersion`). */
export const readOAuthServerFile = async (path: string): Promise<{ readonly doc: OAuthServerDocument; readonly version: string }> => {
  let text: string
  let version: string
  try {
    // The time first, then the text: a change between the two is newer than the time kept, so it is read next time.
    version = fileVersion(await stat(path))
    text = await readFile(path, "utf8")
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return { doc: EMPTY_DOCUMENT, version: ABSENT }
    throw e
  }
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {
    throw new OAuthServerFileError(`${path} is not JSON`)
  }
  if (!isRecord(parsed) || parsed["version"] !== 1 || !isRecord(parsed["clients"]) || !isRecord(parsed["registered"]) || !isRecord(parsed["refresh"])) {
    throw new OAuthServerFileError(`${path} is not an authorization server file (version 1 with clients, registered, refresh)`)
  }
  // Prototype-free maps: a client id such as `__proto__` is a key like any other.
  const own = <T>(o: Record<string, unknown>) => Object.assign(Object.create(null) as Record<string, T>, o as Record<string, T>)
  return {
    doc: { version: 1, clients: own<ApprovedClient>(parsed["clients"]), registered: own<RegisteredClient>(parsed["registered"]), refresh: own<RefreshRecord>(parsed["refresh"]) },
    version
  }
}

/** Writes the document (atomically, 0600); resolves with the version written (`fileVersion`). */
export const writeOAuthServerFile = async (path: string, doc: OAuthServerDocument): Promise<string> => fileVersion(await writeAtomically(path, `${JSON.stringify(doc, null, 1)}\n`))
