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
 * - `list-clients`: the approvals (never a secret or a token).
 * - `revoke-client <client_id>`: withdraws the approval and deletes the client's refresh tokens;
 *   its access tokens end with their 10 minutes.
 */
import { resolve as resolvePath } from "node:path"
import { Command, Option } from "commander"
import { freshSecret, OAuthServerFileError, oauthServerFileOf, readOAuthServerFile, sha256, writeOAuthServerFile, type ApprovedClient, type OAuthServerDocument } from "../config/oauth-server-file.js"
import { approvalProblem } from "../http/oauth-server/grants.js"
import { parseArguments, runFileAction, storeClient, UsageError } from "./subcommand.js"

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


/** The table `list-clients` prints. */
export const formatClients = (doc: OAuthServerDocument, now = Date.now()): string => {
  const ids = Object.keys(doc.clients)
  if (ids.length === 0) return "no approved clients\n"
  const refreshOf = (id: string) => Object.values(doc.refresh).filter((r) => r.client_id === id && !r.used && r.expires > now).length
  const rows = [
    ["CLIENT", "AGENT", "TOOLS", "KIND", "APPROVED", "BY", "REFRESH TOKENS"],
    ...ids.map((id) => {
      const c = doc.clients[id]!
      return [id, c.agent, c.tools?.join(",") ?? "-", c.machine ? (c.secret_sha256 === null ? "machine (private_key_jwt)" : "machine (secret)") : "user", c.approved, c.approved_by, String(refreshOf(id))]
    })
  ]
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)))
  return rows.map((r) => r.map((c, i) => c.padEnd(widths[i]!)).join("  ").trimEnd()).join("\n") + "\n"
}

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
  const fileOf = (opts: { config?: string }) =>
    oauthServerFileOf(resolvePath(cwd, opts.config ?? ([env["MCPSTORE_CONFIG"], env["MCPSTORE_MCP_CONFIG_FILE"]].find((v) => v !== undefined && v !== "") || "mcp.json")))
  const configOption = () => new Option("--config <file>", "the services file, beside which the authorization server's file is (default: MCPSTORE_CONFIG or ./mcp.json)")
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
    .addOption(new Option("--url <url>", "approve through this running store (POST /oauth/approve_client): what replicas need (default with MCPSTORE_REDIS_URL set: http://<MCPSTORE_HOST or 127.0.0.1>:<MCPSTORE_PORT or 18200>)"))
    .addOption(new Option("--api-key <key>", "with --url: an admin key of the store (default: MCPSTORE_API_KEY)"))
    .action((clientId: string, opts: { agent: string; tools?: string; machine?: boolean; secret: boolean; config?: string; url?: string; apiKey?: string }) => {
      action = async () => {
        const tools = opts.tools === undefined ? null : opts.tools.split(",").map((t) => t.trim()).filter((t) => t !== "")
        // http client ids on loopback are accepted here; the server takes them only with --auth-dev-loopback-clients.
        const problem = approvalProblem(clientId, opts.agent, tools, true)
        if (problem !== undefined) throw new UsageError(problem)
        const machine = opts.machine === true
        const replica = env["MCPSTORE_REDIS_URL"] !== undefined && env["MCPSTORE_REDIS_URL"] !== ""
        if (opts.url !== undefined || replica) return approveThroughStore(clientId, opts.agent, tools, machine, opts)
        const secret = machine && opts.secret ? freshSecret() : undefined
        const path = fileOf(opts)
        const { doc } = await readOAuthServerFile(path)
        const entry: ApprovedClient = { agent: opts.agent, tools, machine, secret_sha256: secret === undefined ? null : sha256(secret), approved: new Date().toISOString(), approved_by: "cli" }
        await writeOAuthServerFile(path, { ...doc, clients: { ...doc.clients, [clientId]: entry } })
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
    .action((opts: { config?: string }) => {
      action = async () => out(formatClients((await readOAuthServerFile(fileOf(opts))).doc))
    })
  program
    .command("revoke-client")
    .description("withdraw a client's approval and delete its refresh tokens (its access tokens end within 10 minutes)")
    .argument("<client_id>", "the client's id")
    .addOption(configOption())
    .action((clientId: string, opts: { config?: string }) => {
      action = async () => {
        const path = fileOf(opts)
        const { doc } = await readOAuthServerFile(path)
        if (!Object.hasOwn(doc.clients, clientId)) throw new UsageError(`no approved client ${clientId} (auth list-clients)`)
        const clients = Object.fromEntries(Object.entries(doc.clients).filter(([id]) => id !== clientId))
        const refresh = Object.fromEntries(Object.entries(doc.refresh).filter(([, r]) => r.client_id !== clientId))
        await writeOAuthServerFile(path, { ...doc, clients, refresh })
        out(`revoked client ${clientId} (${Object.keys(doc.refresh).length - Object.keys(refresh).length} refresh tokens deleted)\n`)
      }
    })
  /** The approval made by the running store (its file, or its cluster's Redis): the same checks, once, there. */
  const approveThroughStore = async (clientId: string, agent: string, tools: ReadonlyArray<string> | null, machine: boolean, opts: { secret: boolean; url?: string; apiKey?: string }) => {
    if (machine && !opts.secret) throw new UsageError("--no-secret is not taken by the store's route: approve a private_key_jwt client in the store's file (without --url) or on the consent page")
    const { base, request } = storeClient(opts, env)
    const answer = await request("POST", "/oauth/approve_client", { client_id: clientId, agent_id: agent, tools, machine }).catch((e: unknown) => {
      throw new StoreRefused(`the store at ${base} cannot be reached: ${e instanceof Error ? e.message : String(e)}`)
    })
    if (answer.status !== 200) throw new StoreRefused(`the store at ${base} refused the approval (HTTP ${answer.status}): ${String(answer.body["message"] ?? "")}`)
    err(`approved ${clientId} for agent '${agent}'${tools === null ? "" : ` (tools ${tools.join(",")})`}${machine ? " as a machine client" : ""} by the store at ${base}\n`)
    const secret = answer.body["client_secret"]
    if (typeof secret === "string") {
      err("its client secret is shown once:\n")
      out(`${secret}\n`)
    }
  }
  const parsed = await parseArguments(program, argv, err, "mcp-store auth")
  if (parsed !== undefined) return parsed
  return runFileAction(action, program, err, "mcp-store auth", (e) => e instanceof OAuthServerFileError || e instanceof StoreRefused)
}
