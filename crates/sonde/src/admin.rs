//! The commands that talk to a running agent's admin site (`sonde
//! admin-url`, `sonde top`, `sonde tap`): where it listens and the
//! credential it asks for, read from the agent's config as the agent's
//! user reads them.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use sonde::config::{self, AgentSection};

use crate::read;

/// `--config` for the commands that talk to the agent.
#[derive(clap::Args, Debug, Clone)]
pub struct AgentArgs {
    /// The agent's configuration file (default: the embedded defaults).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
}

impl AgentArgs {
    /// The `[agent]` section of the config.
    fn agent(&self) -> anyhow::Result<AgentSection> {
        let config = match &self.config {
            Some(p) => read(p)?,
            None => config::parse(config::DEFAULT_CONFIG).context("embedded default config")?,
        };
        Ok(config.agent)
    }

    /// A client of the agent's admin site.
    pub fn client(&self) -> anyhow::Result<Client> {
        Client::new(&self.agent()?)
    }
}

/// The admin token in `agent.admin_token_file`, if the agent asks for one.
fn token(agent: &AgentSection) -> anyhow::Result<Option<sonde_io::http::Token>> {
    if agent.admin_auth == config::AdminAuth::None {
        return Ok(None);
    }
    let file = agent.admin_token_file();
    let text = std::fs::read_to_string(&file).with_context(|| {
        format!(
            "reading the admin token {} (agent.admin_token_file): run this as the agent's user \
             (sudo -u sonde sonde ...) or as a member of agent.admin_token_group; \
             the agent makes the file at its first start",
            file.display()
        )
    })?;
    sonde_io::http::Token::new(text.trim())
        .with_context(|| format!("{} holds no admin token", file.display()))
        .map(Some)
}

/// A client of one agent's admin site.
pub struct Client {
    base: String,
    token: Option<sonde_io::http::Token>,
    http: ureq::Agent,
}

impl Client {
    /// The client of the admin site `agent` describes.
    ///
    /// # Errors
    ///
    /// The admin site is off, or the token cannot be read.
    pub fn new(agent: &AgentSection) -> anyhow::Result<Client> {
        let addr = agent
            .admin()
            .context("agent.admin_listen is \"\": this agent has no admin site")?;
        let http = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(10)))
            .http_status_as_error(false)
            .build()
            .new_agent();
        Ok(Client {
            base: format!("http://{addr}"),
            token: token(agent)?,
            http,
        })
    }

    /// The site's address, as `http://127.0.0.1:8686`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The token the site asks for, if any.
    pub fn token(&self) -> Option<&sonde_io::http::Token> {
        self.token.as_ref()
    }

    /// GETs `path` (with its query) and returns the body of a 200.
    ///
    /// # Errors
    ///
    /// The agent cannot be reached, or answers anything but 200 (the error
    /// holds its status and answer).
    pub fn get(&self, path: &str) -> anyhow::Result<String> {
        let url = format!("{}{path}", self.base);
        let mut req = self.http.get(&url);
        if let Some(t) = &self.token {
            req = req.header("Authorization", &format!("Bearer {}", t.as_str()));
        }
        let mut resp = req.call().with_context(|| {
            format!(
                "reaching the agent at {}: is it running with this config?",
                self.base
            )
        })?;
        let status = resp.status();
        let body = resp
            .body_mut()
            .read_to_string()
            .with_context(|| format!("reading {url}"))?;
        anyhow::ensure!(status == 200, "{url} answered {status}: {}", body.trim());
        Ok(body)
    }
}

/// `sonde admin-url`: the admin site's sign-in address (or, with
/// `token_only`, the token alone).
pub fn admin_url(args: &AgentArgs, token_only: bool) -> anyhow::Result<()> {
    let agent = args.agent()?;
    let client = Client::new(&agent)?;
    match client.token() {
        None => {
            anyhow::ensure!(
                !token_only,
                "agent.admin_auth is \"none\": the admin site asks for no token"
            );
            println!("{}/", client.base());
        }
        Some(t) if token_only => println!("{}", t.as_str()),
        Some(t) => println!("{}/login?token={}", client.base(), t.as_str()),
    }
    Ok(())
}
