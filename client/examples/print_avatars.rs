//! Joins a room and prints the smoothed remote avatars ten times a second (docs/CLIENTS.md).
//! `cargo run -p plaza-client --features tokio --example print_avatars -- ws://127.0.0.1:7777/v1/ws plaza`

use std::time::{Duration, Instant};

use plaza_client::ReplicaDirectory;
use plaza_client::tokio::{Client, ClientOptions, Polled};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "ws://127.0.0.1:7777/v1/ws".into());
    let room = args.next().unwrap_or_else(|| "plaza".into());
    let mut client = Client::connect(ClientOptions::new(url).room(room)).await?;
    let mut avatars: ReplicaDirectory = ReplicaDirectory::default();
    let mut next_print = Instant::now();
    loop {
        match client.next(Some(next_print)).await {
            // Every event goes to the directory: entered, updated, left, joined, closed...
            Polled::Event(event) => avatars.handle_event(&event, client.now()),
            Polled::Ended => return Ok(()),
            Polled::Deadline => {
                next_print += Duration::from_millis(100);
                avatars.advance(client.now());
                for a in avatars.iter().filter(|a| a.kind == 0) {
                    let name = a.roster.as_ref().map_or("?", |r| r.display_name.as_str());
                    if let Some([x, y, z]) = a.position() {
                        println!("{:>6} {name:<12} {x:8.3} {y:6.3} {z:8.3}", a.entity);
                    }
                }
            }
        }
    }
}
