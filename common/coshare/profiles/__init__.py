"""Program profiles of Spread-n-Share: what they hold and where they are stored."""
