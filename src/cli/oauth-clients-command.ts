/**
 * `mcp-store auth approve-client | list-clients | revoke-client`: the clients of the built-in
 * authorization server, managed without a server, as `keys create|list|revoke` manage keys. They
 * edit the file beside the services file (src/config/oauth-server-file.ts); a running store reads
 * it again on its next request. Replicas keep their approvals in Redis: `approve-client` then goes
 * through a running store (below).
 *
 * - `approve-client <client_id> --agent <id> [--tools <globs>] [--machine [--no-secret]]` binds a
 *   client to an agent ahead of time: its authorization then completes without the consent page.
 *   `--machine` makes a client-credentials client and prints its secret once (the file keeps its
 *   hash); with `--no-secret` it signs with a key of its metadata document (`private_key_jwt`).
 *   With `--url` (or MCPSTORE_REDIS_URL set: the store is a replica, whose approvals live in Redis
 *   and which never reads the file), the approval is made by the running store instead, through its
 *   admin route `POST /oauth/approve_client` with `--api-key` (an admin key).
 * - `list-clients`: the approvals (never a secret or a token); through the store (`GET
 *   /oauth/clients`) in the same cases.
 * - `revoke-client <client_id>`: withdraws the approval and deletes the client's refresh tokens;
 *   its access tokens end with their 10 minutes. Through the store (`POST /oauth/revoke_client`) in
 *   the same cases: there the families of its refresh tokens are revoked, their access tokens at once.
 */
import { Command, Option } from "commander"
import { withFileLock } from "../config/file-lock.js"
import { freshSecret, OAuthServerFileError, oauthServerFileOf, readOAuthServerFile, sha256, writeOAuthServerFile, type ApprovedClient, type OAuthServerDocument } from "../config/oauth-server-file.js"
import { approvalProblem } from "../http/oauth-server/grants.js"
import { parseArguments, runFileAction, servicesFileOf, storeClient, UsageError } from "./subcommand.js"

/** The running store refused the approval, or could not be reached (exit code 1). */
class StoreRefused extends Error {
  readonly code = "store_refused"
}

/** The subcommands of `mcp-store auth` handled here (any other word is a service name: src/cli/auth-command.ts). */
export const CLIENT_COMMANDS: ReadonlySet<string> = new Set(["approve-client", "list-clients", "revoke-client"])

/** Where the commands write and what relative paths resolve against. */
export interface OAuthClientsIo {
  readonly cwd?: string
  readonly writeOut?: (text: string) => void
  readonly writeErr?: (text: string) => void
}

/** Rows as a table of aligned columns. */
const table = (rows: ReadonlyArray<ReadonlyArray<string>>): string => {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)))
  return rows.map((r) => r.map((c, i) => c.padEnd(widths[i]!)).join("  ").trimEnd()).join("\n") + "\n"
}

const kindOf = (machine: boolean, hasSecret: boolean): string => (machine ? (hasSecret ? "machine (secret)" : "machine (private_key_jwt)") : "user")

/** The table `list-clients` prints. */
export const formatClients = (doc: OAuthServerDocument, now = Date.now()): string => {
  const ids = Object.keys(doc.clients)
  if (ids.length === 0) return "no approved clients\n"
  const refreshOf = (id: string) => Object.values(doc.refresh).filter((r) => r.client_id === id && !r.used && r.expires > now).length
  return table([
    ["CLIENT", "AGENT", "TOOLS", "KIND", "APPROVED", "BY", "REFRESH TOKENS"],
    ...ids.map((id) => {
      const c = doc.clients[id]!
      return [id, c.agent, c.tools?.join(",") ?? "-", kindOf(c.machine, c.secret_sha256 !== null), c.approved, c.approved_by, String(refreshOf(id))]
    })
  ])
}

/** A client as `GET /oauth/clients` lists it. */
interface ListedClient {
  readonly client_id: string
  readonly agent_id: string
  readonly tools: ReadonlyArray<string> | null
  readonly machine: boolean
  readonly has_secret: boolean
  readonly approved: string
  readonly approved_by: string
}

/** The table `list-clients` prints from a running store's list (refresh tokens are not counted there). */
const formatListed = (clients: ReadonlyArray<ListedClient>): string =>
  clients.length === 0
    ? "no approved clients\n"
    : table([
        ["CLIENT", "AGENT", "TOOLS", "KIND", "APPROVED", "BY"],
        ...clients.map((c) => [String(c.client_id), String(c.agent_id), c.tools?.join(",") ?? "-", kindOf(c.machine === true, c.has_secret === true), String(c.approved), String(c.approved_by)])
      ])

/**
 * Runs `mcp-store auth <command>` for the commands of CLIENT_COMMANDS (argv starts with the
 * command's name). Resolves with the exit code: 0 done, 1 the file could not be read or written, 2 a
 * usage error.
 */
export const runOAuthClients = async (argv: ReadonlyArray<string>, env: NodeJS.ProcessEnv, io: OAuthClientsIo = {}): Promise<number> => {
  const out = io.writeOut ?? ((text: string) => void process.stdout.write(text))
  const err = io.writeErr ?? ((text: string) => void process.stderr.write(text))
  const cwd = io.cwd ?? process.cwd()
  let action: (() => Promise<void>) | undefined
  const fileOf = (opts: { config?: string }) => oauthServerFileOf(servicesFileOf(opts.config, env, cwd))
  const configOption = () => new Option("--config <file>", "the services file, beside which the authorization server's file is (default: MCPSTORE_CONFIG or ./mcp.json)")
  const urlOption = (route: string) =>
    new Option("--url <url>", `do it through this running store (${route}): what replicas need (default with MCPSTORE_REDIS_URL set: http://<MCPSTORE_HOST or 127.0.0.1>:<MCPSTORE_PORT or 18200>)`)
  const apiKeyOption = () => new Option("--api-key <key>", "with --url: an admin key of the store (default: MCPSTORE_API_KEY)")
  /** Whether a command goes through a running store: `--url` given, or the store is a replica (its state is in Redis). */
  const throughStore = (opts: { url?: string }) => opts.url !== undefined || (env["MCPSTORE_REDIS_URL"] !== undefined && env["MCPSTORE_REDIS_URL"] !== "")
  /** A request to the running store; its refusal or absence as a StoreRefused naming `what`. */
  const askStore = async (opts: { url?: string; apiKey?: string }, what: string, method: "GET" | "POST", path: string, body?: unknown) => {
    const { base, request } = storeClient(opts, env)
    const answer = await request(method, path, body).catch((e: unknown) => {
      throw new StoreRefused(`the store at ${base} cannot be reached: ${e instanceof Error ? e.message : String(e)}`)
    })
    if (answer.status !== 200) throw new StoreRefused(`the store at ${base} refused ${what} (HTTP ${answer.status}): ${String(answer.body["message"] ?? "")}`)
    return { base, body: answer.body }
  }
  const program = new Command("mcp-store auth")
    .description("the clients of the built-in authorization server (--auth-server)")
    .exitOverride()
    .configureOutput({ writeOut: out, writeErr: err, outputError: () => undefined })
  program
    .command("approve-client")
    .description("approve a client and bind it to an agent: its authorizations then complete without the consent page")
    .argument("<client_id>", "the client's id: its metadata document's https URL (or a dcr_ id it registered)")
    .addOption(new Option("--agent <id>", "the agent whose MCP endpoint the client's tokens reach").makeOptionMandatory())
    .addOption(new Option("--tools <globs>", "comma list of globs over callable names <service>__<tool> the tokens may see and call (default: all of the agent's)"))
    .addOption(new Option("--machine", "a machine client (client credentials grant): prints a client secret once"))
    .addOption(new Option("--no-secret", "with --machine: no secret; the client signs with a key of its metadata document (private_key_jwt)"))
    .addOption(configOption())
    .addOption(urlOption("POST /oauth/approve_client"))
    .addOption(apiKeyOption())
    .action((clientId: string, opts: { agent: string; tools?: string; machine?: boolean; secret: boolean; config?: string; url?: string; apiKey?: string }) => {
      action = async () => {
        const tools = opts.tools === undefined ? null : opts.tools.split(",").map((t) => t.trim()).filter((t) => t !== "")
        // http client ids on loopback are accepted here; the server takes them only with --auth-dev-loopback-clients.
        const problem = approvalProblem(clientId, opts.agent, tools, true)
        if (problem !== undefined) throw new UsageError(problem)
        const machine = opts.machine === true
        if (throughStore(opts)) return approveThroughStore(clientId, opts.agent, tools, machine, opts)
        const secret = machine && opts.secret ? freshSecret() : undefined
        const path = fileOf(opts)
        const entry: ApprovedClient = { agent: opts.agent, tools, machine, secret_sha256: secret === undefined ? null : sha256(secret), approved: new Date().toISOString(), approved_by: "cli" }
        // Under the file's lock, as the running store changes it: neither change undoes the other.
        await withFileLock(path, async () => {
          const { doc } = await readOAuthServerFile(path)
          await writeOAuthServerFile(path, { ...doc, clients: { ...doc.clients, [clientId]: entry } })
        })
        err(`approved ${clientId} for agent '${opts.agent}'${tools === null ? "" : ` (tools ${tools.join(",")})`}${machine ? " as a machine client" : ""} in ${path}\n`)
        if (secret !== undefined) {
          err("its client secret is shown once:\n")
          out(`${secret}\n`)
        }
      }
    })
  program
    .command("list-clients")
    .description("list the approved clients: agents, tools, kinds, dates (never a secret or a token)")
    .addOption(configOption())
    .addOption(urlOption("GET /oauth/clients"))
    .addOption(apiKeyOption())
    .action((opts: { config?: string; url?: string; apiKey?: string }) => {
      action = async () => {
        if (!throughStore(opts)) return out(formatClients((await readOAuthServerFile(fileOf(opts))).doc))
        const { body } = await askStore(opts, "the list", "GET", "/oauth/clients")
        out(formatListed(Array.isArray(body["clients"]) ? (body["clients"] as ReadonlyArray<ListedClient>) : []))
      }
    })
  program
    .command("revoke-client")
    .description("withdraw a client's approval and delete its refresh tokens (its access tokens end within 10 minutes)")
    .argument("<client_id>", "the client's id")
    .addOption(configOption())
    .addOption(urlOption("POST /oauth/revoke_client"))
    .addOption(apiKeyOption())
    .action((clientId: string, opts: { config?: string; url?: string; apiKey?: string }) => {
      action = async () => {
        if (throughStore(opts)) {
          const { base, body } = await askStore(opts, "the revocation", "POST", "/oauth/revoke_client", { client_id: clientId })
          return out(`revoked client ${clientId} through the store at ${base} (${String(body["families_revoked"])} token families revoked)\n`)
        }
        const path = fileOf(opts)
        const deleted = await withFileLock(path, async () => {
          const { doc } = await readOAuthServerFile(path)
          if (!Object.hasOwn(doc.clients, clientId)) throw new UsageError(`no approved client ${clientId} (auth list-clients)`)
          const clients = Object.fromEntries(Object.entries(doc.clients).filter(([id]) => id !== clientId))
          const refresh = Object.fromEntries(Object.entries(doc.refresh).filter(([, r]) => r.client_id !== clientId))
          await writeOAuthServerFile(path, { ...doc, clients, refresh })
          return Object.keys(doc.refresh).length - Object.keys(refresh).length
        })
        out(`revoked client ${clientId} (${deleted} refresh tokens deleted)\n`)
      }
    })
  /** The approval made by the running store (its file, or its cluster's Redis): the same checks, once, there. */
  const approveThroughStore = async (clientId: string, agent: string, tools: ReadonlyArray<string> | null, machine: boolean, opts: { secret: boolean; url?: string; apiKey?: string }) => {
    if (machine && !opts.secret) throw new UsageError("--no-secret is not taken by the store's route: approve a private_key_jwt client in the store's file (without --url) or on the consent page")
    const { base, body } = await askStore(opts, "the approval", "POST", "/oauth/approve_client", { client_id: clientId, agent_id: agent, tools, machine })
    err(`approved ${clientId} for agent '${agent}'${tools === null ? "" : ` (tools ${tools.join(",")})`}${machine ? " as a machine client" : ""} by the store at ${base}\n`)
    const secret = body["client_secret"]
    if (typeof secret === "string") {
      err("its client secret is shown once:\n")
      out(`${secret}\n`)
    }
  }
  const parsed = await parseArguments(program, argv, err, "mcp-store auth")
  if (parsed !== undefined) return parsed
  return runFileAction(action, program, err, "mcp-store auth", (e) => e instanceof OAuthServerFileError || e instanceof StoreRefused)
}
